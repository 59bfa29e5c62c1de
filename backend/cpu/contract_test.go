package cpu_test

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/backendtest"
	"github.com/mlxgo/mlxgo/backend/cpu"
)

// TestContract runs the backend contract suite on every precision the CPU
// backend offers. "fast" differs from "reference" only in the quantized
// matmul, which is approximate by design (int8 activations, judged by
// conformance's TestFastPrecision against the oracle's model fixtures); the rest of its contract is checked.
func TestContract(t *testing.T) {
	open := func(p string) func() (backend.Backend, error) {
		return func() (backend.Backend, error) { return cpu.New(backend.Options{Precision: p}) }
	}
	t.Run("reference", func(t *testing.T) { backendtest.Run(t, open("reference")) })
	t.Run("high", func(t *testing.T) { backendtest.Run(t, open("high")) })
	t.Run("fast", func(t *testing.T) {
		backendtest.RunApproximate(t, open("fast"), "int8 activations per block of 32 (relative error ~2^-8 of the block maximum per element); judged by conformance TestFastPrecision (KL against the oracle, row fast_logits)", "QuantizedMatmul")
	})
}
