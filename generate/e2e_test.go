package generate

import (
	"fmt"
	"slices"
	"testing"
)

// e2eScript runs mlx_lm's generate_step on the fake model of fake_test.go,
// written with MLX ops, and prints the tokens and forward lengths of each
// configuration. "legacy" prefills the cache outside generate_step, so its
// processors' context starts at the last prompt token (LastPromptToken).
const e2eScript = `
import json, mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler, make_logits_processors

V, A, B, C = 300, 37, 101, 13
class Cache:
    def __init__(self):
        self.offset = 0
        self.state = mx.zeros((1,))

def make_model(calls):
    def model(x, cache):
        L = x.shape[1]
        calls.append(L)
        c = cache[0]
        pos = mx.arange(c.offset, c.offset + L)[:, None]
        c.offset += L
        tok = x[0].astype(mx.int32)[:, None]
        k = (A * mx.arange(V)[None, :] + B * tok + C * pos) % 997
        return (k.astype(mx.float32) / 64 - 8).astype(mx.bfloat16)[None]
    return model

prompt = [(i * 53 + 7) % V for i in range(23)]
cfgs = [
    dict(name="greedy"),
    dict(name="temp", sampler=dict(temp=0.8), seed=5),
    dict(name="chain", sampler=dict(temp=1.0, top_p=0.9, min_p=0.05, top_k=30), seed=7),
    dict(name="penalty-greedy", procs=dict(repetition_penalty=1.5)),
    dict(name="penalty-sampled", sampler=dict(temp=0.7, top_p=0.95), procs=dict(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.2, logit_bias={5: 3.0}), seed=11),
    dict(name="legacy-penalty", procs=dict(repetition_penalty=1.5, repetition_context_size=40), legacy=True),
]
out = []
for cfg in cfgs:
    calls = []
    model = make_model(calls)
    cache = [Cache()]
    if "seed" in cfg:
        mx.random.seed(cfg["seed"])
    sampler = make_sampler(**cfg.get("sampler", {}))
    procs = make_logits_processors(**cfg.get("procs", {}))
    p = prompt
    if cfg.get("legacy"):
        model(mx.array(p[:-1])[None], cache)
        p = p[-1:]
    toks = []
    for tok, _ in generate_step(mx.array(p), model, max_tokens=40, sampler=sampler, logits_processors=procs, prompt_cache=cache, prefill_step_size=5):
        toks.append(tok)
    out.append({"name": cfg["name"], "tokens": toks, "calls": calls})
print(json.dumps(out))
`

// TestGenerateMatchesMLXLM runs Generate and mlx_lm's generate_step on the
// same fake model and requires the same tokens. This exercises the loop,
// the chunking, logsumexp on the cpu backend, the processors' context and
// the order in which the samplers consume random keys.
func TestGenerateMatchesMLXLM(t *testing.T) {
	var cases []struct {
		Name   string
		Tokens []int32
		Calls  []int
	}
	oracle(t, e2eScript, &cases)
	opts := map[string]Options{
		"greedy":         {},
		"temp":           {Sampler: SamplerOptions{Temp: 0.8, Seed: 5}},
		"chain":          {Sampler: SamplerOptions{Temp: 1, TopP: 0.9, MinP: 0.05, TopK: 30, Seed: 7}},
		"penalty-greedy": {Processors: ProcessorOptions{RepetitionPenalty: 1.5}},
		"penalty-sampled": {
			Sampler:    SamplerOptions{Temp: 0.7, TopP: 0.95, Seed: 11},
			Processors: ProcessorOptions{RepetitionPenalty: 1.3, PresencePenalty: 0.4, FrequencyPenalty: 0.2, LogitBias: map[int32]float32{5: 3}},
		},
		"legacy-penalty": {Processors: ProcessorOptions{RepetitionPenalty: 1.5, RepetitionContextSize: 40}, PromptContext: LastPromptToken},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			o, ok := opts[c.Name]
			if !ok {
				t.Fatalf("no options for case %q", c.Name)
			}
			o.MaxTokens = 40
			o.PrefillStepSize = 5
			m := newFake(t)
			res, err := Generate(m, fakePrompt(23), o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tokens, c.Tokens) {
				t.Fatalf("got tokens\n%v\nwant\n%v", res.Tokens, c.Tokens)
			}
			// generate_step runs one step past the last token it yields;
			// Generate does not, and the legacy case prefilled in one call.
			want := fmt.Sprint(c.Calls[:len(c.Calls)-1])
			if c.Name == "legacy-penalty" {
				want = fmt.Sprint([]int{5, 5, 5, 5, 2}) + " + " + fmt.Sprint(c.Calls[1:len(c.Calls)-1])
				if got := fmt.Sprint(m.calls[:5]) + " + " + fmt.Sprint(m.calls[5:]); got != want {
					t.Fatalf("got forward lengths %s, want %s", got, want)
				}
				return
			}
			if got := fmt.Sprint(m.calls); got != want {
				t.Fatalf("got forward lengths %s, want %s", got, want)
			}
		})
	}
}
