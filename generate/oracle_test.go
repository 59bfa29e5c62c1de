package generate

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// venvPython returns the oracle interpreter, skipping the test loudly when it
// is absent (failing instead when MLXGO_REQUIRE_VENV=1).
func venvPython(t *testing.T) string {
	t.Helper()
	py, err := filepath.Abs(filepath.Join("..", ".venv", "bin", "python"))
	if err == nil {
		if _, err = os.Stat(py); err == nil {
			return py
		}
	}
	msg := "MLX ORACLE UNAVAILABLE: " + py + " not found (" + err.Error() + "); this test computes MLX reference values at test time and cannot run without .venv"
	if os.Getenv("MLXGO_REQUIRE_VENV") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// oracle runs a Python script with MLX and decodes the JSON it prints into out.
func oracle(t *testing.T, script string, out any) {
	t.Helper()
	py := venvPython(t)
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
