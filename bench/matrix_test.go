package bench

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stat is a Stat of samples, as a child's report gives it.
func stat(samples ...float64) Stat { return NewStat(samples) }

// matrixFixture is a two-checkpoint matrix run with round numbers: A has
// both CPU precisions and llama.cpp, B has cpu-fast only (no GGUF twin) and
// a failed cpu-reference.
func matrixFixture() *Result {
	return &Result{
		CPU: "Test CPU", Cores: 2, GoVersion: "go1.26", LoadAvgStart: "1.0", LoadAvgEnd: "2.0",
		BandwidthGBs: 10, BandwidthNote: "test", PromptLens: []int{128, 512}, DecodeTokens: 16,
		Checkpoints: []CheckpointResult{
			{Name: "A", Model: "/m/A", GGUF: "/m/A.gguf", CheckpointBytes: 135e6, GGUFBytes: 90e6, Configs: []ConfigResult{
				{Name: "cpu-fast", Engine: "mlxgo", Reps: 2, Warmup: 1, DecodeTokens: 16, WeightBytesPerToken: 70e6, BandwidthFraction: 0.9,
					PackedBytes: 70e6, ReleasedBytes: 100e6, Prompts: []PromptResult{{Prompt: 128, PrefillTPS: stat(250)}, {Prompt: 512, PrefillTPS: stat(300)}}, Decode: stat(20)},
				{Name: "cpu-reference", Engine: "mlxgo", Reps: 2, Warmup: 1, DecodeTokens: 16, WeightBytesPerToken: 100e6, BandwidthFraction: 0.45,
					Prompts: []PromptResult{{Prompt: 128, PrefillTPS: stat(80)}, {Prompt: 512, PrefillTPS: stat(100)}}, Decode: stat(10)},
				{Name: "llama.cpp", Engine: "llama.cpp", Reps: 2, Warmup: 1, DecodeTokens: 16, WeightBytesPerToken: 80e6, BandwidthFraction: 0.004,
					Prompts: []PromptResult{{Prompt: 128, PrefillTPS: stat(200)}, {Prompt: 512, PrefillTPS: stat(150)}}, Decode: stat(40)},
			}},
			{Name: "B", Model: "/m/B", CheckpointBytes: 2.5e6, NoLlama: "no GGUF twin at /m/B.gguf", Configs: []ConfigResult{
				{Name: "cpu-fast", Engine: "mlxgo", Reps: 2, Warmup: 1, DecodeTokens: 16, Prompts: []PromptResult{{Prompt: 128, PrefillTPS: stat(500)}}, Decode: stat(50)},
				{Name: "cpu-reference", Engine: "mlxgo", Err: "child exited 2"},
			}},
		},
	}
}

// The rows and cells, by hand: A's ratios are against A's llama.cpp row
// (decode 20/40 = 0.50×, 10/40 = 0.25×; prefill at 512, the longest both
// measured: 300/150 = 2.00×, 100/150 = 0.67×); B has no llama.cpp row, so
// its ratios are — and a note says why; the llama.cpp row's size is the
// GGUF file's, the others' the safetensors'.
func TestMatrixMarkdown(t *testing.T) {
	r := matrixFixture()
	md := r.Markdown()
	for _, want := range []string{
		"| checkpoint | config | prefill 128 tok/s | prefill 512 tok/s | decode tok/s | ×llama.cpp decode / prefill | decode / BW limit | size MB |\n",
		"| A | cpu-fast | 250 (n=1) | 300 (n=1) | 20.0 (n=1) | 0.50× / 2.00× @512 | 90% | 135 |\n",
		"|  | cpu-reference | 80.0 (n=1) | 100 (n=1) | 10.0 (n=1) | 0.25× / 0.67× @512 | 45% | 135 |\n",
		"|  | llama.cpp | 200 (n=1) | 150 (n=1) | 40.0 (n=1) | — | <1% | 90 |\n",
		"| B | cpu-fast | 500 (n=1) | — | 50.0 (n=1) | — | — | 2.50 |\n",
		"|  | cpu-reference | failed: child exited 2 |\n",
		"×llama.cpp is — on every row of a checkpoint without a llama.cpp row",
		"- A: /m/A (135 MB of safetensors, reads 100 MB/token → limit 100.0 tok/s; cpu-fast packed, reads 70 MB/token → limit 142.9 tok/s); GGUF twin /m/A.gguf (90 MB, reads 80 MB/token → limit 125.0 tok/s).\n",
		"- B: /m/B (2.50 MB of safetensors); no llama.cpp row: no GGUF twin at /m/B.gguf.\n",
		"- Every row: 1 warm-up + 2 reps, 16 decode tokens.\n",
		"Read bandwidth: 10.0 GB/s (test), measured once",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	if md != r.MatrixMarkdown() {
		t.Error("Markdown of a matrix run is not MatrixMarkdown")
	}
	if !r.Failed() {
		t.Error("Failed: got false, want true (B's cpu-reference failed)")
	}
	// Written and read back (mlxgo bench --report), it renders the same.
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Markdown(); got != md {
		t.Errorf("read back:\n%s\nwant\n%s", got, md)
	}
	if err := back.WritePNG(filepath.Join(t.TempDir(), "r.png")); err != nil {
		t.Errorf("chart: %v", err)
	}
}

// With every checkpoint's llama.cpp row present there is no note on —.
func TestMatrixMarkdownAllTwins(t *testing.T) {
	r := matrixFixture()
	r.Checkpoints = r.Checkpoints[:1]
	if md := r.Markdown(); strings.Contains(md, "without a llama.cpp row") || strings.Contains(md, "no llama.cpp row") {
		t.Errorf("a note on a missing llama.cpp row with none missing:\n%s", md)
	}
}

// TestPairedRatio: the median of the per-round ratios with their range, by
// hand; anything but two or more rounds on both sides, all positive, is
// refused (the caller falls back to the ratio of the medians).
func TestPairedRatio(t *testing.T) {
	for _, c := range []struct {
		a, b []float64
		want string
		ok   bool
	}{
		{[]float64{10, 30, 20}, []float64{20, 40, 25}, "0.75× (0.50–0.80)", true}, // 0.5, 0.75, 0.8
		{[]float64{9, 11}, []float64{10, 10}, "1.00× (0.90–1.10)", true},          // two rounds: their mean
		{[]float64{10}, []float64{20}, "", false},                                 // one round
		{[]float64{10, 20}, []float64{20}, "", false},                             // rounds missing on one side
		{[]float64{10, 20}, []float64{20, 0}, "", false},                          // a failed value
		{nil, nil, "", false},
	} {
		got, ok := pairedRatio(c.a, c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("pairedRatio(%v, %v) = %q, %v; want %q, %v", c.a, c.b, got, ok, c.want, c.ok)
		}
	}
}

// A matrix of three rounds: where both rows hold every round the ratios are
// paired (A's cpu-fast decode 18/40, 20/40, 24/40 → 0.50× (0.45–0.60);
// prefill at 512: 300/150, 330/150, 270/100 → 2.20× (2.00–2.70)); a row
// without per-round values (an older result's) keeps the ratio of medians;
// the note says how the paired ratio is made.
func TestMatrixMarkdownRounds(t *testing.T) {
	r := matrixFixture()
	r.Rounds = 3
	a := &r.Checkpoints[0]
	a.Configs[0].DecodeRounds = []float64{18, 20, 24}
	a.Configs[0].Prompts[1].Rounds = []float64{300, 330, 270}
	a.Configs[2].DecodeRounds = []float64{40, 40, 40}
	a.Configs[2].Prompts[1].Rounds = []float64{150, 150, 100}
	md := r.Markdown()
	for _, want := range []string{
		"| A | cpu-fast | 250 (n=1) | 300 (n=1) | 20.0 (n=1) | 0.50× (0.45–0.60) / 2.20× (2.00–2.70) @512 | 90% | 135 |\n",
		"|  | cpu-reference | 80.0 (n=1) | 100 (n=1) | 10.0 (n=1) | 0.25× / 0.67× @512 | 45% | 135 |\n",
		"the ratio is the median of the rounds' own ratios",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
}

// TestBandwidthFraction, by hand: with every round's decode and bandwidth
// the median of the rounds' own fractions (100 MB a token: 20 tok/s at 4
// GB/s 0.5, 30 at 5 0.6, 10 at 2 0.5 → 0.5); rounds missing on either side,
// or one round, fall back to the decode median over the run's bandwidth
// (20 tok/s · 100 MB / 4 GB/s = 0.5; 30 / 10 GB/s → 0.3).
func TestBandwidthFraction(t *testing.T) {
	for _, c := range []struct {
		decode, bw []float64
		runBW      float64
		want       float64
	}{
		{[]float64{20, 30, 10}, []float64{4, 5, 2}, 1e9, 0.5},
		{[]float64{20, 30, 10}, []float64{4, 5}, 10e9, 0.2},
		{[]float64{30}, []float64{5}, 10e9, 0.3},
		{[]float64{20, 30}, []float64{4, 0}, 10e9, 0},
	} {
		cr := ConfigResult{WeightBytesPerToken: 100e6, Decode: NewStat(c.decode), DecodeRounds: c.decode, BandwidthRounds: c.bw}
		if got := cr.bandwidthFraction(c.runBW); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("decode %v, bandwidth %v, run %g: got %g, want %g", c.decode, c.bw, c.runBW, got, c.want)
		}
	}
}

// With a reading before each checkpoint in every round, the note gives
// their count, median and range.
func TestMatrixMarkdownProbes(t *testing.T) {
	r := matrixFixture()
	r.Rounds, r.BandwidthProbes = 2, []float64{30, 50, 40, 34}
	want := "Read bandwidth: 10.0 GB/s at the start (test; the limits under Checkpoints use it), and before each checkpoint in every round 4 readings, median 37.0, range 30.0–50.0 GB/s"
	if md := r.Markdown(); !strings.Contains(md, want) {
		t.Errorf("missing %q in\n%s", want, md)
	}
}

// Two rounds of one configuration, by hand: samples joined (prefill 512:
// 100, 300, 200 → median 200; decode 10, 30 → 20), the peak RSS the larger,
// the load time the mean over the rounds ((1·1 + 3·1)/2 = 2), reps added; a
// prompt length only the second round measured is kept.
func TestMergeRound(t *testing.T) {
	a := ConfigResult{Name: "cpu-fast", Reps: 2, Rounds: 1, LoadS: 1, PeakRSSBytes: 5, DecodePeakRSSBytes: 4,
		Prompts: []PromptResult{{Prompt: 512, PrefillTPS: stat(100, 300)}}, Decode: stat(10), TTFT: stat(0.5)}
	b := ConfigResult{Name: "cpu-fast", Reps: 1, Rounds: 1, LoadS: 3, PeakRSSBytes: 7, DecodePeakRSSBytes: 3,
		Prompts: []PromptResult{{Prompt: 512, PrefillTPS: stat(200)}, {Prompt: 128, PrefillTPS: stat(50)}}, Decode: stat(30), TTFT: stat(0.7)}
	m := mergeRound(a, b)
	p512, _ := m.Prompt(512)
	p128, _ := m.Prompt(128)
	if m.Reps != 3 || m.Rounds != 2 || m.LoadS != 2 || m.PeakRSSBytes != 7 || m.DecodePeakRSSBytes != 4 ||
		p512.PrefillTPS.Median != 200 || p512.PrefillTPS.N != 3 || p128.PrefillTPS.Median != 50 ||
		m.Decode.Median != 20 || m.Decode.N != 2 || m.TTFT.N != 2 {
		t.Errorf("got %+v", m)
	}
	// Each round's medians, marked and joined in round order.
	a.markRound()
	b.markRound()
	a.BandwidthRounds, b.BandwidthRounds = []float64{30}, []float64{40}
	m = mergeRound(a, b)
	if !slices.Equal(m.BandwidthRounds, []float64{30, 40}) {
		t.Errorf("bandwidth rounds %v, want [30 40]", m.BandwidthRounds)
	}
	if p512, _ := m.Prompt(512); !slices.Equal(m.DecodeRounds, []float64{10, 30}) || !slices.Equal(p512.Rounds, []float64{200, 200}) {
		t.Errorf("rounds: decode %v, prefill 512 %v; want [10 30], [200 200]", m.DecodeRounds, p512.Rounds)
	}
	if len(a.Prompts) != 1 || a.Prompts[0].PrefillTPS.N != 2 {
		t.Errorf("mergeRound changed its first argument: %+v", a.Prompts)
	}
	fail := ConfigResult{Name: "cpu-fast", Err: "boom"}
	if m := mergeRound(a, fail); m.Err != "boom" {
		t.Errorf("a failed round: got %+v, want its error", m)
	}
}

// TestReadBytesPerToken: a configuration that packs nothing reads the
// checkpoint's bytes; one that packs reads them less the pages given back,
// plus the packed form, and never less than the packed form.
func TestReadBytesPerToken(t *testing.T) {
	for _, c := range []struct{ perToken, packed, released, want int64 }{
		{772e6, 0, 0, 772e6},
		{772e6, 0, 500e6, 772e6},     // released without packing: not counted
		{772e6, 695e6, 771e6, 696e6}, // Llama-3.2-1B: the Q4_0 twin's bytes plus an embedding row
		{100e6, 60e6, 40e6, 120e6},   // part of the model packed
		{100e6, 70e6, 130e6, 70e6},   // more given back than one step reads: the packed form alone
	} {
		if got := ReadBytesPerToken(c.perToken, c.packed, c.released); got != c.want {
			t.Errorf("ReadBytesPerToken(%d, %d, %d) = %d, want %d", c.perToken, c.packed, c.released, got, c.want)
		}
	}
}
