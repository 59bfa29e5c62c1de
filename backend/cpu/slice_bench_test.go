package cpu

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSliceUpdateRows is the cache appends of a decode step of rows
// rows on SmolLM2-135M's shape, as nn's per-row caches make them: per
// layer (30) one SliceUpdateRows of the rows' keys and one of their values
// ([rows, 3, 1, 64] bfloat16 into per-row buffers [1, 3, 256, 64]), each
// row at a position of its own; the positions advance a slot a step. One
// op is a step's 60 calls, in a scope that keeps the new buffers (as the
// batch generator's step does).
func BenchmarkSliceUpdateRows(b *testing.B) {
	defer func(p bool) { poison = p }(poison)
	poison = false // the tests' NaN fill of every pooled buffer is not the op's work
	for _, rows := range []int{1, 8} {
		b.Run(fmt.Sprintf("rows%d", rows), func(b *testing.B) {
			be, err := New(backend.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			const layers, hk, capS, d = 30, 3, 256, 64
			bufs := make([][]backend.Array, 2*layers)
			for i := range bufs {
				bufs[i] = make([]backend.Array, rows)
				for r := range rows {
					bufs[i][r] = be.Zeros(tensor.Shape{1, hk, capS, d}, tensor.BF16)
				}
			}
			one := be.Full(tensor.Shape{rows, hk, 1, d}, 0.5, tensor.BF16)
			src := be.Binary(backend.Add, one, one) // float32 values of dtype bf16, as RoPE leaves the keys
			at := make([]int, rows)
			step := 0
			for b.Loop() {
				for r := range at {
					at[r] = (step + 7*r) % capS
				}
				sc := be.Scope()
				for i := range bufs {
					bufs[i] = be.SliceUpdateRows(bufs[i], src, 2, at)
					sc.Keep(bufs[i]...)
				}
				sc.Close()
				step++
			}
		})
	}
}

// BenchmarkLogSumExp is the log-softmax normalizer of a decode step's
// logits: LogSumExp over the last axis of [rows, 49152] bfloat16 values
// (SmolLM2's vocabulary), the rows of a batch.
func BenchmarkLogSumExp(b *testing.B) {
	defer func(p bool) { poison = p }(poison)
	poison = false // the tests' NaN fill of every pooled buffer is not the op's work
	for _, rows := range []int{1, 2, 7, 8} {
		b.Run(fmt.Sprintf("rows%d", rows), func(b *testing.B) {
			be, err := New(backend.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			x := randArray(be, 1, tensor.BF16, rows, 49152)
			for b.Loop() {
				be.Release(be.LogSumExp(x, -1, true))
			}
		})
	}
}
