package generate

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// oracle runs a Python script with MLX and decodes the JSON it prints into out.
func oracle(t *testing.T, script string, out any) {
	t.Helper()
	py := testenv.Python(t)
	cmd := exec.Command(py, "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED=0")
	b, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle script failed: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("oracle script failed: %v", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("oracle output is not the expected JSON: %v\n%s", err, b)
	}
}
