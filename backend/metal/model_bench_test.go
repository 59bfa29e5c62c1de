//go:build mlx

package metal

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// benchModel is the checkpoint of BenchmarkModelDecodeBuild:
// $MLXGO_BENCH_MODEL, else the full-size synthetic MiniCPM5-1B.
func benchModel(b *testing.B) string {
	if d := os.Getenv("MLXGO_BENCH_MODEL"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	d := filepath.Join(home, ".cache", "mlxgo", "synth-minicpm5-1b-optiq")
	if _, err := os.Stat(filepath.Join(d, "config.json")); err != nil {
		b.Skipf("!!! SKIPPING: no checkpoint at %s (mlxgo synth --out %s, or set MLXGO_BENCH_MODEL) !!!", d, d)
	}
	return d
}

// BenchmarkModelDecodeBuild measures the host's part of a decode step of a
// real model: recording the graph of one token (the model, the logsumexp
// and the argmax, as generate schedules it) with no evaluation. The cache
// holds a short prompt; after each step the cache is evaluated and trimmed
// back with the timer stopped, so every step builds the same graph. It
// reports the ops recorded per step (Backend op calls) and the primitives
// of the step's graph (GraphOps).
func BenchmarkModelDecodeBuild(b *testing.B) {
	dir := benchModel(b)
	be, err := New(backend.Options{Device: os.Getenv("MLXGO_BENCH_DEVICE")})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	m, err := minicpm5.Load(be, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	var cache []nn.KVCache
	defer func() {
		_ = be.Do(func() error {
			for _, c := range cache {
				c.Release()
			}
			return nil
		})
	}()
	err = be.Do(func() (err error) {
		defer backend.Recover(&err)
		cache = m.NewCache()
		prompt := make([]int32, 15)
		for i := range prompt {
			prompt[i] = int32(i + 1)
		}
		if err := m.Append(be.FromHost(tensor.FromInt32(tensor.Shape{1, len(prompt)}, prompt)), cache); err != nil {
			return err
		}
		if err := be.Eval(states(cache)...); err != nil {
			return err
		}
		step := func() (backend.Array, uint64, error) {
			ops := be.ops
			s := be.Scope()
			defer s.Close()
			ids := be.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{16}))
			logits, err := m.LastLogits(ids, cache)
			if err != nil {
				return nil, 0, err
			}
			s.Keep(states(cache)...)
			logits = be.Reshape(logits, 1, logits.Shape()[2])
			lp := be.Binary(backend.Subtract, logits, be.LogSumExp(logits, -1, true))
			return s.Keep(be.Argmax(lp, -1, false)), be.ops - ops, nil
		}
		var times []time.Duration
		var ops uint64
		var prims map[string]int
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			tok, n, err := step()
			times = append(times, time.Since(t0))
			if err != nil {
				return err
			}
			b.StopTimer()
			if i == 0 {
				ops = n
				if prims, err = be.GraphOps(append(states(cache), tok)...); err != nil {
					b.Logf("no graph primitive count: %v", err)
				}
			}
			if err := be.Eval(append(states(cache), tok)...); err != nil {
				return err
			}
			be.Release(tok)
			for _, c := range cache {
				c.Trim(1)
			}
			b.StartTimer()
		}
		b.StopTimer()
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		total := 0
		for _, v := range prims {
			total += v
		}
		b.ReportMetric(float64(times[len(times)/2].Microseconds()), "build-us/step(median)")
		b.ReportMetric(float64(times[0].Microseconds()), "build-us/step(min)")
		b.ReportMetric(float64(ops), "ops/step")
		b.ReportMetric(float64(total), "graph-prims/step")
		if testing.Verbose() {
			b.Logf("graph primitives of one step (%s, device %s): %v", dir, be.Device(), prims)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// states lists every cache's arrays.
func states(cache []nn.KVCache) []backend.Array {
	var out []backend.Array
	for _, c := range cache {
		out = append(out, c.State()...)
	}
	return out
}
