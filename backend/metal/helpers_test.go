//go:build mlx

package metal

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
)

// open opens a backend on MLX's default device and closes it at the end of the test.
func open(t *testing.T) *Backend {
	t.Helper()
	b, err := New(backend.Options{})
	if err != nil {
		t.Fatalf("open mlx backend: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}
