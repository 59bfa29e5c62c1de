package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/synth"
)

const fixture = "../conformance/testdata/models/optiq-bf16"

func TestNewStat(t *testing.T) {
	for _, c := range []struct {
		name             string
		in               []float64
		med, lo, hi, spr float64
	}{
		{"odd", []float64{3, 1, 2}, 2, 1, 3, 1},         // spread (3-1)/2
		{"even", []float64{4, 1, 2, 3}, 2.5, 1, 4, 1.2}, // (4-1)/2.5
		{"one", []float64{5}, 5, 5, 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewStat(c.in)
			if s.Median != c.med || s.Min != c.lo || s.Max != c.hi || math.Abs(s.Spread()-c.spr) > 1e-12 || s.N != len(c.in) {
				t.Errorf("got %+v spread %v, want median %v min %v max %v spread %v", s, s.Spread(), c.med, c.lo, c.hi, c.spr)
			}
		})
	}
	if s := NewStat(nil); s.N != 0 || s.Format(1) != "—" {
		t.Errorf("empty: got %+v %q, want N 0 and —", s, s.Format(1))
	}
}

// Hand-computed: prefill 128 in 0.5 s and 0.25 s → 256 and 512 tok/s,
// median 384; the warm-up is ignored. Generate tokens at 1.0, 1.1, 1.3,
// 1.6, 1.6 s: decode = (5-2) / (1.6-1.0) = 5 tok/s; TTFT 1.0 s after 128.
func TestSummarise(t *testing.T) {
	runs := []RunRecord{
		{Kind: "prefill", Prompt: 128, Warmup: true, Seconds: 10},
		{Kind: "prefill", Prompt: 128, Seconds: 0.5},
		{Kind: "prefill", Prompt: 128, Seconds: 0.25},
		{Kind: "prefill", Prompt: 512, Seconds: 2},
		{Kind: "generate", Prompt: 128, Warmup: true, TTFT: 9, Tokens: []float64{9, 10, 11}},
		{Kind: "generate", Prompt: 128, TTFT: 1.0, Tokens: []float64{1.0, 1.1, 1.3, 1.6, 1.6}},
	}
	prompts, ttft, tp, dec := summarise(runs)
	if len(prompts) != 2 || prompts[0].Prompt != 128 || prompts[0].PrefillTPS.Median != 384 || prompts[1].PrefillTPS.Median != 256 {
		t.Errorf("prompts: got %+v, want 128 → 384 tok/s, 512 → 256 tok/s", prompts)
	}
	if ttft.Median != 1.0 || ttft.N != 1 || tp != 128 {
		t.Errorf("ttft: got %+v after %d, want 1.0 s (n=1) after 128", ttft, tp)
	}
	if math.Abs(dec.Median-5) > 1e-9 || dec.N != 1 {
		t.Errorf("decode: got %+v, want 5 tok/s (n=1)", dec)
	}
}

func TestSelectConfigs(t *testing.T) {
	for _, c := range []struct {
		sel  []string
		want []string
		err  string
	}{
		{[]string{"cpu-reference", "mlx_lm"}, []string{"cpu-reference", "mlx_lm"}, ""},
		{[]string{"cpu-high"}, []string{"cpu-high"}, ""},
		{[]string{"cpu-fast", "cpu-fast-packed"}, []string{"cpu-fast", "cpu-fast-packed"}, ""},
		{[]string{"llama.cpp"}, []string{"llama.cpp"}, ""},
		{[]string{"gpu"}, nil, `unknown configuration "gpu"`},
	} {
		t.Run(strings.Join(c.sel, ","), func(t *testing.T) {
			got, err := selectConfigs(c.sel)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
	got, err := selectConfigs([]string{"cpu"})
	if err != nil || len(got) == 0 || slices.Contains(got, "cpu-high") || slices.Contains(got, "cpu-fast-packed") || slices.Contains(got, "cpu-fast-unpacked") || !slices.Contains(got, "cpu-reference") {
		t.Errorf(`"cpu": got %v, %v; want every cpu-* but cpu-high, cpu-fast-packed and cpu-fast-unpacked`, got, err)
	}
	if name, opts, err := ParseConfig("cpu-fast-unpacked"); err != nil || name != "cpu" || opts.Precision != "fast" || !opts.NoPackWeights || opts.PackWeights {
		t.Errorf("cpu-fast-unpacked: got %q %+v %v, want the cpu backend, fast, NoPackWeights", name, opts, err)
	}
	if name, opts, err := ParseConfig("cpu-fast-packed"); err != nil || name != "cpu" || opts.Precision != "fast" || !opts.PackWeights {
		t.Errorf("cpu-fast-packed: got %q %+v %v, want the cpu backend, fast, PackWeights", name, opts, err)
	}
}

// A child on a tiny fixture: one prefill per prompt length and one
// generation of 4 tokens, reported as JSON the harness reads back.
func TestRunChild(t *testing.T) {
	ids, err := PromptIDs(fixture, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	err = RunChild(ChildOptions{Model: fixture, Backend: "cpu", IDs: ids, PromptLens: []int{8, 4}, DecodeTokens: 4, Reps: 1}, &out, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var rep ChildReport
	if err := json.Unmarshal(lastLine(out.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	var kinds []string
	for _, r := range rep.Runs {
		kinds = append(kinds, r.Kind)
	}
	if !slices.Equal(kinds, []string{"prefill", "prefill", "generate"}) || len(rep.Runs[2].Tokens) != 4 || rep.Runs[2].Prompt != 8 {
		t.Errorf("runs: got %+v, want prefill 8, prefill 4, generate 4 tokens after 8", rep.Runs)
	}
	if runtime.GOOS == "linux" && (rep.DecodePeakRSSBytes <= 0 || rep.PrefillPeakRSSBytes <= 0) {
		t.Errorf("peak RSS: got %d bytes over generation, %d before it; want both measured (> 0) on Linux", rep.DecodePeakRSSBytes, rep.PrefillPeakRSSBytes)
	}
	if err := RunChild(ChildOptions{Model: fixture, Backend: "cpu", IDs: ids, PromptLens: []int{9}, DecodeTokens: 4, Reps: 1}, &out, &log); err == nil ||
		!strings.Contains(err.Error(), "prompt length 9") {
		t.Errorf("prompt longer than the ids: got %v, want an error naming prompt length 9", err)
	}
}

// The per-token bytes of the tiny optiq checkpoint, untied and tied: every
// block's linears and norms, the final norm, and the head plus one
// embedding row, or (tied) the whole embedding once, which the tied head
// reads. By hand from the synth spec: each linear of [out, in] at b bits
// stores out·in·b/8 bytes of codes and 2·2·out·in/64 of bf16 scales and
// biases.
func TestCheckpointWeightBytes(t *testing.T) {
	for _, tied := range []bool{false, true} {
		t.Run(fmt.Sprintf("tied=%v", tied), func(t *testing.T) {
			s := synth.Presets["tiny"]
			s.Tied = tied
			dir := fixture
			if tied {
				dir = filepath.Join(t.TempDir(), "tied")
				if err := synth.WriteMLX(dir, s, nil); err != nil {
					t.Fatal(err)
				}
			}
			lin := func(out, in, bits int) int64 { return int64(out*in*bits/8 + 4*out*in/64) }
			var want int64
			for _, m := range s.Modules() {
				switch {
				case m.Path != "model.embed_tokens":
					want += lin(m.Out, m.In, m.Bits)
				case tied:
					want += lin(m.Out, m.In, m.Bits) // the head's read, the embedding row within it
				default:
					want += lin(1, m.In, m.Bits) // one embedding row
				}
			}
			want += int64((2*s.Layers + 1) * s.Hidden * 2) // norms, bf16
			got, files, err := CheckpointWeightBytes(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("per token: got %d, want %d", got, want)
			}
			st, _ := os.Stat(filepath.Join(dir, "model.safetensors"))
			if files != st.Size() {
				t.Errorf("files: got %d, want %d", files, st.Size())
			}
			if tied && got > files {
				t.Errorf("tied: per token %d exceeds the files' %d bytes (the embedding counted twice?)", got, files)
			}
		})
	}
}

// A stand-in llama-bench prints canned JSON (other values when given -d)
// and logs its arguments; the harness reads its samples and the GGUF
// twin's per-token bytes. Without a depth one invocation measures both;
// with one the prompts come from an invocation without -d and the decode
// from one with "-p 0 -n 8 -d 16", each taking only its own kind.
func TestLlamaBench(t *testing.T) {
	dir := t.TempDir()
	g := filepath.Join(dir, "tiny.gguf")
	if err := synth.WriteGGUF(g, synth.Presets["tiny"], nil); err != nil {
		t.Fatal(err)
	}
	script, args := filepath.Join(dir, "llama-bench"), filepath.Join(dir, "args")
	canned := `[{"n_prompt": 16, "n_gen": 0, "avg_ts": 150, "samples_ts": [100, 200]},
	{"n_prompt": 0, "n_gen": 8, "avg_ts": 30, "samples_ts": [30, 20, 40]}]`
	deep := `[{"n_prompt": 16, "n_gen": 0, "avg_ts": 999, "samples_ts": [999]},
	{"n_prompt": 0, "n_gen": 8, "avg_ts": 25, "samples_ts": [25, 24, 26, 25]}]`
	sh := "#!/bin/sh\necho \"$*\" >> " + args + "\ncase \"$*\" in *' -d '*) cat <<'EOF'\n" + deep + "\nEOF\n;; *) cat <<'EOF'\n" + canned + "\nEOF\n;; esac\n"
	if err := os.WriteFile(script, []byte(sh), 0o755); err != nil {
		t.Fatal(err)
	}
	want, err := GGUFWeightBytes(g)
	if err != nil || want <= 0 {
		t.Fatalf("weight bytes %d: %v", want, err)
	}
	for _, c := range []struct {
		depth       int
		decode      float64
		n           int
		invocations []string
	}{
		{0, 30, 3, []string{"-p 16 -n 8"}},
		{16, 25, 4, []string{"-p 16 -n 0", "-p 0 -n 8 -d 16"}},
	} {
		os.Remove(args)
		o := &Options{LlamaBench: script, Threads: 2}
		cr := o.runLlamaBench(g, runPlan{lens: []int{16}, decode: 8, reps: 2, depth: c.depth})
		if cr.Err != "" {
			t.Fatal(cr.Err)
		}
		if p, ok := cr.Prompt(16); !ok || len(cr.Prompts) != 1 || p.PrefillTPS.Median != 150 || cr.Decode.Median != c.decode || cr.Decode.N != c.n {
			t.Errorf("depth %d: got prefill %+v, decode %+v; want median 150 and %g (n=%d)", c.depth, cr.Prompts, cr.Decode, c.decode, c.n)
		}
		if cr.WeightBytesPerToken != want {
			t.Errorf("depth %d: weight bytes %d, want %d", c.depth, cr.WeightBytesPerToken, want)
		}
		got, _ := os.ReadFile(args)
		lines := strings.Split(strings.TrimSpace(string(got)), "\n")
		if len(lines) != len(c.invocations) {
			t.Fatalf("depth %d: invocations %q, want %d", c.depth, lines, len(c.invocations))
		}
		for i, w := range c.invocations {
			if !strings.Contains(lines[i], w) {
				t.Errorf("depth %d: invocation %d is %q, want %q in it", c.depth, i, lines[i], w)
			}
		}
	}
}

func TestReadBandwidth(t *testing.T) {
	if bw := ReadBandwidth(2, 1<<20, 1); !(bw > 0) {
		t.Errorf("got %v bytes/s, want > 0", bw)
	}
	for _, n := range []int{0, 1, 7, 8, 9, 10, 64, 1000, 4099} {
		p := make([]uint64, n)
		var want uint64
		for i := range p {
			p[i] = uint64(i+1) * 0x9e3779b97f4a7c15
			want += p[i]
		}
		if got := sumWords(p); got != want {
			t.Errorf("sumWords(%d words): got %d, want %d", n, got, want)
		}
		if got := sumStream(p); got != want {
			t.Errorf("sumStream(%d words): got %d, want %d", n, got, want)
		}
	}
}

// TestGGUFWeightBytes: a tied head reads all of token_embd each step, an
// untied one reads one row of it (and output.weight, counted as any tensor).
func TestGGUFWeightBytes(t *testing.T) {
	for _, tied := range []bool{true, false} {
		t.Run(fmt.Sprintf("tied=%v", tied), func(t *testing.T) {
			spec := synth.Presets["tiny"]
			spec.Tied = tied
			g := filepath.Join(t.TempDir(), "m.gguf")
			if err := synth.WriteGGUF(g, spec, nil); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(g)
			if err != nil {
				t.Fatal(err)
			}
			var all, embd, rows int64
			for _, tn := range f.Tensors {
				all += int64(tn.Size)
				if tn.Name == "token_embd.weight" {
					embd, rows = int64(tn.Size), int64(tn.Dims[1])
				}
			}
			f.Close()
			want := all
			if !tied {
				want = all - embd + embd/rows
			}
			got, err := GGUFWeightBytes(g)
			if err != nil || got != want || embd == 0 {
				t.Errorf("got %d (%v), want %d (all tensors %d, token_embd %d over %d rows)", got, err, want, all, embd, rows)
			}
		})
	}
}
