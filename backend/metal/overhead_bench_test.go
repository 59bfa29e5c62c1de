//go:build mlx

package metal

import (
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkOpRecord measures the host cost of recording one lazy op (no
// evaluation): the per-op overhead a decode step pays about a thousand times.
func BenchmarkOpRecord(b *testing.B) {
	be, err := New(backend.Options{Device: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	_ = be.Do(func() error {
		x := be.Zeros(tensor.Shape{1, 1536}, tensor.BF16)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			s := be.Scope()
			y := x
			for j := 0; j < 100; j++ {
				y = be.Binary(backend.Add, y, x)
			}
			s.Close()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/op-recorded")
		return nil
	})
}

// BenchmarkDecodeStep runs the decode-like step of memory_test.go (26 ops
// of the kinds a llama layer uses: quantized matmuls, RoPE, SDPA, slices,
// cache updates, SwiGLU, a scope and Keep) pipelined as generation runs it:
// step i+1 is recorded and started with AsyncEval before token i is read.
// It reports the time to record a step (building it and releasing the old
// token, the host's part) apart from the whole step, which on MLX's CPU
// device is mostly computing. Every 64 steps the timer stops while a fresh
// cache is made.
func BenchmarkDecodeStep(b *testing.B) {
	be, err := New(backend.Options{Device: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const window = 64
	err = be.Do(func() (err error) {
		defer backend.Recover(&err)
		var d *decoder
		var tok backend.Array
		var recording time.Duration
		reset := func() error {
			if d != nil {
				if _, err := be.ToHost(tok); err != nil {
					return err
				}
				be.Release(tok, d.norm, d.wq.W, d.wq.Scales, d.wq.Biases, d.wo.W, d.wo.Scales, d.wo.Biases,
					d.wg.W, d.wg.Scales, d.wg.Biases, d.k, d.v, d.x)
			}
			d, err = newDecoder(be, window)
			tok = nil
			return err
		}
		if err := reset(); err != nil {
			return err
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if i > 0 && i%window == 0 {
				b.StopTimer()
				if err := reset(); err != nil {
					return err
				}
				b.StartTimer()
			}
			t0 := time.Now()
			next := d.step(i % window)
			recording += time.Since(t0)
			if err := be.Eval(next, d.k, d.v, d.x); err != nil {
				return err
			}
			if tok != nil {
				if _, err := be.ToHost(tok); err != nil {
					return err
				}
				be.Release(tok)
			}
			tok = next
		}
		b.StopTimer()
		b.ReportMetric(float64(recording.Nanoseconds())/float64(b.N), "record-ns/step")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDoHandoff measures Backend.Do called from a goroutine other than
// the MLX thread: the cost of handing work to the thread locked to MLX and
// waiting for it, which generation pays for every call it makes from
// outside.
func BenchmarkDoHandoff(b *testing.B) {
	be, err := New(backend.Options{Device: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	for i := 0; i < b.N; i++ {
		_ = be.Do(func() error { return nil })
	}
}
