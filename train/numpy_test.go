package train

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// TestNumpyPermutation: NumpyRNG replays np.random.seed followed by a
// sequence of np.random.permutation calls (sizes across the mask
// boundaries and past one MT19937 block of 624 words).
func TestNumpyPermutation(t *testing.T) {
	py := testenv.Python(t)
	sizes := []int{1, 2, 3, 5, 8, 9, 17, 100, 1000, 4}
	for _, seed := range []uint32{0, 1, 42, 4294967295} {
		arg, _ := json.Marshal(map[string]any{"seed": seed, "sizes": sizes})
		out, err := exec.Command(py, "-c", `
import json, sys
import numpy as np
a = json.loads(sys.argv[1])
np.random.seed(a["seed"])
print(json.dumps([np.random.permutation(n).tolist() for n in a["sizes"]]))
`, string(arg)).Output()
		if err != nil {
			t.Fatalf("oracle: %v", err)
		}
		var want [][]int
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatal(err)
		}
		r := NewNumpyRNG(seed)
		for i, n := range sizes {
			if got := r.Permutation(n); fmt.Sprint(got) != fmt.Sprint(want[i]) {
				t.Fatalf("seed %d, call %d (n=%d): %v, numpy %v", seed, i, n, got, want[i])
			}
		}
	}
}
