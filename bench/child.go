package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/procmem"
	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// ChildOptions is one Go configuration's measurement plan.
type ChildOptions struct {
	Model        string          // checkpoint directory
	Backend      string          // registry name
	Options      backend.Options // precision, device, threads
	IDs          []int32         // prompt ids; each prompt is a prefix
	PromptLens   []int
	DecodeTokens int // generated after the first prompt length
	Reps, Warmup int
}

// RunChild loads the model on the backend, runs the plan and writes a
// ChildReport as one JSON line to stdout; progress goes to stderr.
func RunChild(o ChildOptions, stdout, stderr io.Writer) error {
	for _, p := range o.PromptLens {
		if p < 1 || p > len(o.IDs) {
			return fmt.Errorf("bench child: prompt length %d, want 1..%d (the ids given)", p, len(o.IDs))
		}
	}
	if len(o.PromptLens) == 0 {
		return fmt.Errorf("bench child: no prompt lengths")
	}
	if o.DecodeTokens < 3 || o.Reps < 1 || o.Warmup < 0 {
		return fmt.Errorf("bench child: decode tokens %d, reps %d, warm-up %d: want >= 3, >= 1, >= 0", o.DecodeTokens, o.Reps, o.Warmup)
	}
	b, err := backend.Open(o.Backend, o.Options)
	if err != nil {
		return err
	}
	defer b.Close()
	start := time.Now()
	m, err := load(b, o.Model, "", stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	view, err := m.WithCache(nn.CacheOptions{KVDType: autoKVDType(o.Backend, o.Options.Precision)})
	if err != nil {
		return err
	}
	rep := ChildReport{Engine: "mlxgo", Device: o.Backend, LoadS: time.Since(start).Seconds()}
	if o.Options.Precision != "" {
		rep.Device += " " + o.Options.Precision
	}
	if o.Options.Device != "" {
		rep.Device += " " + o.Options.Device
	}
	fmt.Fprintf(stderr, "bench child %s: loaded in %.2fs (%s)\n", rep.Device, rep.LoadS, memoryNote(b))
	for _, p := range o.PromptLens {
		for r := range o.Warmup + o.Reps {
			sec, err := prefill(b, view, o.IDs[:p])
			if err != nil {
				return fmt.Errorf("bench child %s: prefill %d: %w", rep.Device, p, err)
			}
			rec := RunRecord{Kind: "prefill", Prompt: p, Warmup: r < o.Warmup, Seconds: sec}
			rep.Runs = append(rep.Runs, rec)
			fmt.Fprintf(stderr, "bench child %s: prefill %d %s: %.3fs (%.1f tok/s)\n", rep.Device, p, repName(r, o.Warmup, o.Reps), sec, float64(p)/sec)
		}
		fmt.Fprintf(stderr, "bench child %s: after prefill %d: %s\n", rep.Device, p, memoryNote(b))
	}
	p := o.PromptLens[0]
	// The decode peak starts from what the process needs after the prefill
	// runs: their freed buffers go back to the system first (the backend's
	// cache, as generation clears it after a prompt, and Go's heap).
	if c, ok := b.(backend.CacheClearer); ok {
		_ = b.Do(func() (err error) {
			defer backend.Recover(&err)
			c.ClearCache()
			return nil
		})
	}
	runtime.GC()
	debug.FreeOSMemory()
	rep.PrefillPeakRSSBytes = procmem.PeakRSS()
	decodePeak := procmem.ResetPeak()
	for r := range o.Warmup + o.Reps {
		var times []float64
		t0 := time.Now()
		_, err := generate.Generate(view, o.IDs[:p], generate.Options{MaxTokens: o.DecodeTokens}, func(generate.Token) bool {
			times = append(times, time.Since(t0).Seconds())
			return true
		})
		if err != nil {
			return fmt.Errorf("bench child %s: generate after %d: %w", rep.Device, p, err)
		}
		rep.Runs = append(rep.Runs, RunRecord{Kind: "generate", Prompt: p, Warmup: r < o.Warmup, TTFT: times[0], Tokens: times})
		fmt.Fprintf(stderr, "bench child %s: generate after %d %s: first token %.3fs, %d tokens in %.2fs (%s)\n",
			rep.Device, p, repName(r, o.Warmup, o.Reps), times[0], len(times), times[len(times)-1], memoryNote(b))
	}
	if decodePeak {
		rep.DecodePeakRSSBytes = procmem.PeakRSS()
	}
	st := b.Stats()
	rep.PackedBytes, rep.ReleasedBytes = st.PackedBytes, st.ReleasedBytes
	return json.NewEncoder(stdout).Encode(rep)
}

// prefill times the prompt through a fresh cache of m's kind, as
// generation prefills it, until the last position's logits are computed (PrefillLast evaluates
// them; they are not copied to the host, as mlx_lm_driver.py does not copy
// them either). It runs on the backend's thread (Do), as generation does:
// outside it, every op of a backend with its own thread (mlx) would cross
// threads.
func prefill(b backend.Backend, m minicpm5.CacheView, ids []int32) (sec float64, err error) {
	cache := m.NewCache()
	defer func() {
		_ = b.Do(func() error {
			for _, c := range cache {
				c.Release()
			}
			return nil
		})
	}()
	t0 := time.Now()
	err = b.Do(func() (err error) {
		defer backend.Recover(&err)
		logits, err := m.PrefillLast(ids, cache, 2048)
		b.Release(logits)
		return err
	})
	return time.Since(t0).Seconds(), err
}

// autoKVDType is the dtype of the full KV caches mlxgo's commands make on
// backend at precision (--kv-dtype auto, cpu.AutoKVDType): a benchmark's
// configuration measures what the commands run.
func autoKVDType(backend, precision string) tensor.DType {
	if backend == "cpu" {
		return cpu.AutoKVDType(precision)
	}
	return 0
}

func repName(r, warmup, reps int) string {
	if r < warmup {
		return "warm-up"
	}
	return fmt.Sprintf("rep %d/%d", r-warmup+1, reps)
}

// load loads the checkpoint dir on b and writes what the loader noticed to
// stderr as "warning: " lines (each prefixed with who, when set), which the
// parent passes through.
func load(b backend.Backend, dir, who string, stderr io.Writer) (*minicpm5.Model, error) {
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		return nil, err
	}
	for _, w := range m.Warnings() {
		fmt.Fprintf(stderr, "warning: %s%s\n", who, w)
	}
	return m, nil
}

// ReadIDs reads a JSON list of token ids.
func ReadIDs(path string) ([]int32, error) {
	data, err := safefile.ReadFile(path, safefile.MaxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var ids []int32
	if err := json.Unmarshal(data, &ids); err != nil {
		return nil, fmt.Errorf("bench: %s: want a JSON list of int32 token ids: %w", path, err)
	}
	return ids, nil
}

// memoryNote describes the process's memory for the progress log: its
// resident set now and at its peak (Linux /proc/self/status), and the
// backend's own allocator counters when it has them (the MLX backend's
// Memory method: active, peak and cached bytes), found by reflection so
// that this file builds without the mlx tag.
func memoryNote(b backend.Backend) string {
	var parts []string
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "VmRSS" || k == "VmHWM") {
				parts = append(parts, k+" "+strings.Join(strings.Fields(v), " "))
			}
		}
	}
	if m := reflect.ValueOf(b).MethodByName("Memory"); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 {
		var stats string
		if err := b.Do(func() error { stats = fmt.Sprintf("%+v", m.Call(nil)[0].Interface()); return nil }); err == nil {
			parts = append(parts, "backend memory "+stats)
		}
	}
	if len(parts) == 0 {
		return "memory unknown"
	}
	return strings.Join(parts, ", ")
}
