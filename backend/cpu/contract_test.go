package cpu_test

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/backendtest"
	"github.com/mlxgo/mlxgo/backend/cpu"
)

// TestContract runs the backend contract suite on every precision the CPU
// backend offers.
func TestContract(t *testing.T) {
	for _, p := range []string{"reference", "high", "fast"} {
		t.Run(p, func(t *testing.T) {
			backendtest.Run(t, func() (backend.Backend, error) { return cpu.New(backend.Options{Precision: p}) })
		})
	}
}
