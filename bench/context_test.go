package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
)

func TestParseContexts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		err  string
	}{
		{"1k,4k,8k,16k,32k", []int{1024, 4096, 8192, 16384, 32768}, ""},
		{"256, 512", []int{256, 512}, ""},
		{"512,256", nil, "ascending"},
		{"1k,1024", nil, "ascending"},
		{"0", nil, "positive integer"},
		{"x", nil, "positive integer"},
		{"", nil, "at least one"},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseContexts(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestContextCacheOptions(t *testing.T) {
	for _, c := range []struct {
		kind string
		want nn.CacheOptions
		err  string
	}{
		{"full", nn.CacheOptions{}, ""},
		{"quantized", nn.CacheOptions{KVBits: 8, KVGroupSize: 64}, ""},
		{"rotating", nn.CacheOptions{MaxKVSize: 4096}, ""},
		{"turbo", nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 8, VBits: 3}}, ""},
		{"turbo:k4v2", nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 4, VBits: 2}}, ""},
		{"turbo:k3v3", nn.CacheOptions{}, "key bits 3"},
		{"paged", nn.CacheOptions{}, "want one of full, quantized, rotating, turbo"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			got, err := ContextCacheOptions(c.kind, 8, 64, 4096)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v; want an error containing %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	if _, err := ContextCacheOptions("quantized", 3, 64, 0); err == nil || !strings.Contains(err.Error(), "KV bits 3") {
		t.Errorf("3-bit quantized cache: got %v, want the bits named", err)
	}
}

// TestParseLlamaDepth: llama-bench's JSON (the fields it writes for -d)
// becomes one point per depth: ppP the prefill, tgN the decode; entries of
// other depths are ignored.
func TestParseLlamaDepth(t *testing.T) {
	out := `[{"n_prompt": 512, "n_gen": 0, "n_depth": 1024, "avg_ts": 300, "samples_ts": [290, 310]},
	{"n_prompt": 0, "n_gen": 32, "n_depth": 1024, "avg_ts": 40, "samples_ts": [40, 41, 39]},
	{"n_prompt": 512, "n_gen": 0, "n_depth": 4096, "avg_ts": 200},
	{"n_prompt": 0, "n_gen": 32, "n_depth": 4096, "avg_ts": 30, "samples_ts": [30]},
	{"n_prompt": 0, "n_gen": 32, "n_depth": 777, "avg_ts": 1, "samples_ts": [1]}]`
	pts, err := parseLlamaDepth([]byte(out), []int{1024, 4096})
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 2 || pts[0].PrefillTPS.Median != 300 || pts[0].DecodeTPS.Median != 40 || pts[0].DecodeTPS.N != 3 ||
		pts[1].PrefillTPS.Median != 200 || pts[1].PrefillTPS.N != 1 || pts[1].DecodeTPS.Median != 30 || pts[1].DecodeDepth != 4096 {
		t.Errorf("got %+v", pts)
	}
	if _, err := parseLlamaDepth([]byte("not json"), []int{1}); err == nil {
		t.Error("bad output: got no error")
	}
}

// TestContextChild runs the Go child of the sweep on the tiny fixture
// checkpoint with short contexts, for each cache kind: one point per
// context at the context's depth (a rotating cache of 100 slots cannot be
// trimmed back past its window: its decode starts deeper), positive speeds
// from the runs' times, memory per token from the caches' arrays (bf16
// keys and values of 2 KV heads of 32 over 3 layers: 768 bytes; 8-bit
// codes plus bf16 scale and bias per 32 values: 432), and a Markdown table
// with a row per kind and the ratio to the first context.
func TestContextChild(t *testing.T) {
	ids, err := PromptIDs(fixture, contextIDs([]int{64, 128}, 16, 1, 1), 1)
	if err != nil {
		t.Fatal(err)
	}
	res := &ContextResult{Model: fixture, Contexts: []int{64, 128}, Prefill: 16, DecodeTokens: 4, Reps: 1, Warmup: 1}
	for _, c := range []struct{ kind string }{{"full"}, {"quantized"}, {"rotating"}} {
		co, err := ContextCacheOptions(c.kind, 8, 32, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out, log bytes.Buffer
		err = RunContextChild(ContextChildOptions{Model: fixture, Backend: "cpu", IDs: ids, Contexts: []int{64, 128}, Cache: co,
			CacheTag: c.kind, Prefill: 16, Decode: 4, Reps: 1, Warmup: 1}, &out, &log)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.kind, err, log.String())
		}
		var rep ContextChildReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%s: report %q: %v", c.kind, out.String(), err)
		}
		row := summariseContext(rep)
		row.Config, row.Kind = "cpu", c.kind
		res.Rows = append(res.Rows, row)
		if len(row.Points) != 2 {
			t.Fatalf("%s: %d points, want 2", c.kind, len(row.Points))
		}
		for i, p := range row.Points {
			ctx := []int{64, 128}[i]
			if p.Context != ctx || p.PrefillTPS.N != 1 || p.DecodeTPS.N != 1 || !(p.PrefillTPS.Median > 0) || !(p.DecodeTPS.Median > 0) || p.CacheBytes <= 0 {
				t.Errorf("%s: point %d: %+v", c.kind, i, p)
			}
			if c.kind != "rotating" && (p.PrefillDepth != ctx || p.DecodeDepth != ctx) {
				t.Errorf("%s: point %d at depths %d and %d, want %d", c.kind, i, p.PrefillDepth, p.DecodeDepth, ctx)
			}
		}
		if r := row.Points[1]; c.kind == "rotating" && r.DecodeDepth <= 128 {
			t.Errorf("rotating: decode at %d, want deeper than 128 (not trimmable past the window)", r.DecodeDepth)
		}
		want := map[string]float64{"full": 768, "quantized": 432, "rotating": 768}[c.kind]
		if math.Abs(row.BytesPerToken-want) > 1e-9 {
			t.Errorf("%s: %v bytes per token, want %v", c.kind, row.BytesPerToken, want)
		}
	}
	md := res.Markdown()
	for _, want := range []string{"| cpu | quantized | 432 |", "decode tok/s @128", "prefill tok/s @64", "×)"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestRunContextTurboHeadDim: a TurboQuant kind on a checkpoint whose
// head_dim TurboQuant does not offer is an error naming both before any
// child runs.
func TestRunContextTurboHeadDim(t *testing.T) {
	_, err := RunContext(ContextOptions{Model: fixture, Configs: []string{"cpu-fast"}, Contexts: []int{64}, Caches: []string{"turbo:k4v2"}, Reps: 1, DecodeTokens: 3, Prefill: 16})
	if err == nil || !strings.Contains(err.Error(), "--kv-cache turbo:k4v2: turboquant: head_dim 32 is not supported") || !strings.Contains(err.Error(), fixture) {
		t.Errorf("got %v, want the head_dim and the checkpoint named", err)
	}
}
