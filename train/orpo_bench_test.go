package train

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/synth"
	"github.com/mlxgo/mlxgo/tensor"
)

// devicePeak, set by the MLX build (mlx_peak_test.go), restarts and
// reads MLX's allocator peak for b; nil for other backends.
var devicePeak func(b backend.Backend) (reset func(), peak func() int64)

// BenchmarkORPOStep times one ORPO training step (forward, backward and
// Adam update of LoRA rank 8 on the last 16 layers, mlx_lm's defaults)
// on one pair of random tokens, prefix-shared and with two forwards, at
// the prompt lengths of $MLXGO_ORPO_PROMPTS (default 256,1024,2048) with
// responses of 256 tokens, on every backend, on the checkpoint at
// $MLXGO_ORPO_MODEL (default the Makefile's SmolLM2 conversion,
// .venv/smollm2/SmolLM2-135M-Instruct-Q4_1-mlx; "synth" writes and uses
// mlxgo synth's checkpoint of that layout: SmolLM2-135M's shapes, q4g32,
// an 8-bit embedding, float16). Each configuration
// opens its backend afresh and runs one untimed step first; it reports
// pair tokens (P+Rc+Rr) per second and the step's peak memory (the CPU
// backend's live arrays; MLX's allocator peak). $MLXGO_ORPO_MODES picks
// the modes (default "shared,two"; "shared-array" is the prefix-shared
// step with the plain Bool ArrayMask instead of the PrefixMask,
// --orpo-attention dense). Run one at a time:
//
//	go test ./train -run '^$' -bench ORPOStep -benchtime 1x -timeout 60m
func BenchmarkORPOStep(b *testing.B) {
	model := os.Getenv("MLXGO_ORPO_MODEL")
	if model == "" {
		model = filepath.Join("..", ".venv", "smollm2", "SmolLM2-135M-Instruct-Q4_1-mlx")
	}
	if model == "synth" {
		model = filepath.Join(b.TempDir(), "synth-smollm2-135m")
		s := synth.Presets["smollm2-135m"]
		s.EmbedBits, s.DType = 8, tensor.F16
		if err := synth.WriteMLX(model, s, nil); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		b.Skipf("no checkpoint at %s (set MLXGO_ORPO_MODEL, or make smollm2 and convert): %v", model, err)
	}
	prompts := []int{256, 1024, 2048}
	if s := os.Getenv("MLXGO_ORPO_PROMPTS"); s != "" {
		prompts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("MLXGO_ORPO_PROMPTS: %q is not a positive length", f)
			}
			prompts = append(prompts, n)
		}
	}
	modes := []string{"shared", "two"}
	if s := os.Getenv("MLXGO_ORPO_MODES"); s != "" {
		modes = strings.Split(s, ",")
		for _, m := range modes {
			if m != "shared" && m != "two" && m != "shared-array" {
				b.Fatalf("MLXGO_ORPO_MODES: %q is not shared, two or shared-array", m)
			}
		}
	}
	const resp = 256
	for _, bname := range backend.Names() {
		for _, P := range prompts {
			for _, mode := range modes {
				b.Run(fmt.Sprintf("%s/P=%d/%s", bname, P, mode), func(b *testing.B) {
					o := ORPOArgs{Lambda: DefaultORPOLambda, TwoForwards: mode == "two", DenseAttention: mode == "shared-array"}
					benchORPOStep(b, bname, model, P, resp, o)
				})
			}
		}
	}
}

func benchORPOStep(b *testing.B, bname, model string, P, R int, o ORPOArgs) {
	be, err := backend.Open(bname, backend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	err = be.Do(func() (err error) {
		defer backend.Recover(&err)
		m, err := minicpm5.Load(be, model)
		if err != nil {
			return err
		}
		defer m.Close()
		ads, err := lora.Apply(be, m, 16, lora.Params{Rank: 8, Scale: 20}, generate.NewRNG(0))
		if err != nil {
			return err
		}
		opt, err := NewOptimizer(be, "adam", Constant(1e-5), DefaultOptimizerConfig("adam"))
		if err != nil {
			return err
		}
		t := &Trainer{B: be, Model: m, Adapters: ads, Opt: opt}
		pair := randomPair(rand.New(rand.NewPCG(uint64(P), 1)), m.VocabSize(), P, R, R)
		if os.Getenv("MLXGO_ORPO_WARMUP") != "0" {
			if _, err := t.orpoStep([]Pair{pair}, o); err != nil {
				return err
			}
		}
		var reset func()
		peak := func() int64 { return be.Stats().PeakBytes }
		if devicePeak != nil {
			if r, p := devicePeak(be); r != nil {
				reset, peak = r, p
			}
		}
		if reset != nil {
			reset()
		}
		b.ResetTimer()
		for range b.N {
			if _, err := t.orpoStep([]Pair{pair}, o); err != nil {
				return err
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N*pair.Layout().T())/b.Elapsed().Seconds(), "pairtok/s")
		b.ReportMetric(float64(peak())/(1<<20), "peak-MiB")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
