//go:build mlx

package debug

import (
	"path/filepath"
	"testing"

	_ "github.com/mlxgo/mlxgo/backend/metal"
)

// TestMLXMatchesOracleTaps: tier 1 of the design, tap by tap. The MLX
// backend (on MLX's CPU device, as the oracle ran) gives every tap of every
// fixture checkpoint bit for bit.
func TestMLXMatchesOracleTaps(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(models, "*", TapsFile))
	if len(dirs) != 12 {
		t.Fatalf("found %d oracle tap dumps, want 12", len(dirs))
	}
	for _, dump := range dirs {
		dir := filepath.Dir(dump)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			r, err := Diff(Options{Model: dir, A: Side{Backend: "mlx"}, B: Side{File: dump}, Exact: "on"})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Pass() {
				t.Errorf("mlx vs oracle taps: %s", r.Summary())
			}
		})
	}
}
