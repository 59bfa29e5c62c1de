package generate_test

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// batchCheckpoint loads a fixture checkpoint (models/<name>) on b.
func batchCheckpoint(t *testing.T, b backend.Backend, name string) *minicpm5.Model {
	t.Helper()
	dir := filepath.Join(fixtureDir(), "models", name)
	testenv.Need(t, filepath.Join(dir, "config.json"), "run `make oracle`")
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// perRowView is m with a cache of its own per batch row (nn.CacheOptions.PerRow).
func perRowView(t *testing.T, m *minicpm5.Model) minicpm5.CacheView {
	t.Helper()
	view, err := m.WithCache(nn.CacheOptions{PerRow: true})
	if err != nil {
		t.Fatal(err)
	}
	return view
}

func cpuBackend(t testing.TB) backend.Backend {
	t.Helper()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// batchPrompts are prompts of lengths 1 to 21 (ids from a fixed formula).
func batchPrompts(vocab int, lengths ...int) [][]int32 {
	out := make([][]int32, len(lengths))
	for i, n := range lengths {
		for j := range n {
			out[i] = append(out[i], int32((j*7919+i*104729+13)%vocab))
		}
	}
	return out
}

// TestBatchRowsEqualAlone: on the CPU backend every row of a batch gives,
// token for token, what Generate gives for that prompt alone, on the float32
// checkpoints: greedy, and sampled with a seed of the row's own (the same
// random state as Generate's), with prompts of different lengths prefilled
// in chunks of 4 (so rows are right-padded, rolled, split off and joined to
// the decoding rows while others decode: 2 prompts prefilled at a time, 3
// decoding), different max tokens, and a stop token. With
// BatchOptions.JoinPrefilled (/join) the same, and the model runs one
// forward a decode step and none besides (the rows joining run their last
// prompt token in the decode step), where mlx_lm's order runs one more for
// each group of rows that joins.
func TestBatchRowsEqualAlone(t *testing.T) {
	for _, name := range []string{"fp-f32", "optiq-f32", "q8g32-f32", "fp-f32/join", "optiq-f32/join", "q8g32-f32/join"} {
		t.Run(name, func(t *testing.T) {
			b := cpuBackend(t)
			ckpt, join := strings.CutSuffix(name, "/join")
			m := batchCheckpoint(t, b, ckpt)
			prompts := batchPrompts(m.VocabSize(), 5, 1, 12, 3, 9, 2)
			maxTok := []int{8, 6, 10, 4, 7, 9}
			seqs := make([]generate.SequenceOptions, len(prompts))
			solo := make([]generate.Options, len(prompts))
			for i := range prompts {
				seqs[i].MaxTokens = maxTok[i]
				solo[i] = generate.Options{MaxTokens: maxTok[i], PrefillStepSize: 4}
				if i%2 == 1 {
					seed := uint64(100 + i)
					so := generate.SamplerOptions{Temp: 0.9, TopP: 0.95, Seed: seed}
					seqs[i].Sampler, seqs[i].Seed = &so, &seed
					solo[i].Sampler = so
				}
				if i == 4 {
					po := generate.ProcessorOptions{RepetitionPenalty: 1.3}
					seqs[i].Processors = &po
					solo[i].Processors = po
				}
			}
			// A stop token: the third token row 0 generates alone.
			r0, err := generate.Generate(m, prompts[0], solo[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			stop := r0.Tokens[2]
			for i := range solo {
				solo[i].EOS = []int32{stop}
			}
			opts := generate.BatchOptions{StopTokens: []int32{stop}, PrefillStepSize: 4, PrefillBatchSize: 2, CompletionBatchSize: 3, JoinPrefilled: join}
			cm := &countingModel{BatchModel: m}
			got, st, err := generate.BatchGenerate(cm, prompts, opts, seqs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if join && cm.logits != st.GenerationSteps {
				t.Errorf("JoinPrefilled: %d forwards with the head for %d decode steps, want one a step", cm.logits, st.GenerationSteps)
			}
			if !join && cm.logits <= st.GenerationSteps {
				t.Errorf("%d forwards with the head for %d decode steps, want more (the joining rows' own)", cm.logits, st.GenerationSteps)
			}
			stops := 0
			for i, p := range prompts {
				want, err := generate.Generate(m, p, solo[i], nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[i].Tokens, want.Tokens) || got[i].FinishReason != want.FinishReason {
					t.Errorf("row %d (prompt length %d): batch gave %v (%s), alone %v (%s)", i, len(p), got[i].Tokens, got[i].FinishReason, want.Tokens, want.FinishReason)
				}
				if want.FinishReason == generate.FinishStop {
					stops++
				}
			}
			if stops == 0 {
				t.Errorf("no row stopped at the stop token %d: the test does not check stops", stop)
			}
		})
	}
}

// countingModel counts the forwards with the head (BatchLogits) and the
// token rows (B·L, padding included) of the prefill forwards (BatchAppend).
type countingModel struct {
	generate.BatchModel
	logits, appendRows, appends int
}

func (m *countingModel) BatchAppend(ids backend.Array, cache []*nn.BatchKVCache) error {
	m.appends++
	m.appendRows += ids.Shape().Size()
	return m.BatchModel.BatchAppend(ids, cache)
}

func (m *countingModel) BatchLogits(ids backend.Array, cache []*nn.BatchKVCache) (backend.Array, error) {
	m.logits++
	return m.BatchModel.BatchLogits(ids, cache)
}

// TestBatchSampledRowsEqualAlone: on bfloat16 checkpoints with per-row
// caches (the server's layout on the CPU backend, whose rows get the bits
// they get alone) and in a shared left-padded cache (whose rows get them
// too: the attention starts each row's key blocks at its first key; before
// that, optiq-bf16/shared parted from its solo runs), rows of 4 to 37
// prompt tokens sampled at temperature 3 for 48 tokens, each with a seed
// of its own, give what Generate gives them alone: the batch draws in the
// model's dtype (1/temp and the scaled logits round to it, as in mlx_lm),
// although the rows come to the host as float32. A high temperature makes
// the draws sensitive to that rounding. With NoLogprobs (the server's
// setting) the rows come back into the generator's own buffer
// (backend.HostReader), reused every step.
func TestBatchSampledRowsEqualAlone(t *testing.T) {
	for _, name := range []string{"fp-bf16", "optiq-bf16", "fp-f32/shared", "optiq-bf16/shared", "optiq-bf16/nologprobs", "fp-f32/shared/nologprobs"} {
		t.Run(name, func(t *testing.T) {
			b := cpuBackend(t)
			ckpt, layout, _ := strings.Cut(name, "/")
			layout, noLP := strings.CutSuffix(layout, "nologprobs")
			m := batchCheckpoint(t, b, ckpt)
			view, err := m.WithCache(nn.CacheOptions{PerRow: !strings.HasPrefix(layout, "shared")})
			if err != nil {
				t.Fatal(err)
			}
			prompts := batchPrompts(m.VocabSize(), 4, 7, 2, 37, 19)
			seqs := make([]generate.SequenceOptions, len(prompts))
			solo := make([]generate.Options, len(prompts))
			for i := range prompts {
				seed := uint64(7 + i)
				so := generate.SamplerOptions{Temp: 3, Seed: seed}
				seqs[i] = generate.SequenceOptions{MaxTokens: 48, Sampler: &so, Seed: &seed}
				solo[i] = generate.Options{MaxTokens: 48, Sampler: so}
			}
			got, _, err := generate.BatchGenerate(view, prompts, generate.BatchOptions{NoLogprobs: noLP}, seqs, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				want, err := generate.Generate(m, p, solo[i], nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[i].Tokens, want.Tokens) {
					t.Errorf("row %d: batch gave %v, alone %v", i, got[i].Tokens, want.Tokens)
				}
			}
		})
	}
}

// TestBatchPrefillBudget: a long prompt inserted while other rows decode is
// prefilled over several steps under BatchOptions.PrefillBudget, the
// decoding rows getting a token at every one of them; every row's greedy
// tokens equal Generate's for its prompt alone (whole-prompt prefill), as
// they do with no budget (the long prompt prefilled in one step). With
// BatchOptions.JoinPrefilled it comes one step sooner (the prompt work of a
// step before its decode, which runs the prompt's last token).
func TestBatchPrefillBudget(t *testing.T) {
	for _, name := range []string{"fp-f32", "optiq-f32", "fp-f32/join"} {
		for _, budget := range []int{0, 6} {
			t.Run(fmt.Sprintf("%s/budget%d", name, budget), func(t *testing.T) {
				b := cpuBackend(t)
				ckpt, join := strings.CutSuffix(name, "/join")
				m := batchCheckpoint(t, b, ckpt)
				prompts := batchPrompts(m.VocabSize(), 3, 5, 2, 40)
				short, long := prompts[:3], prompts[3]
				g, err := generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: 24, PrefillBudget: budget, JoinPrefilled: join})
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				uids, err := g.Insert(short, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := map[int][]int32{}
				next := func() []generate.BatchToken {
					t.Helper()
					toks, err := g.Next()
					if err != nil {
						t.Fatal(err)
					}
					for _, tk := range toks {
						got[tk.UID] = append(got[tk.UID], tk.Token)
					}
					return toks
				}
				for len(got[uids[0]]) < 3 {
					next()
				}
				lu, err := g.Insert([][]int32{long}, nil)
				if err != nil {
					t.Fatal(err)
				}
				uids = append(uids, lu[0])
				// Steps until the long row's first token, each handing out
				// a token of every short row.
				steps := 0
				for len(got[lu[0]]) == 0 {
					toks := next()
					steps++
					if len(toks) < 3 {
						t.Fatalf("step %d after the long prompt's insertion handed out %d tokens, want the 3 decoding rows' at least", steps, len(toks))
					}
				}
				// The prompt's 39 tokens before its last: one chunk of 2048
				// without a budget, 7 chunks of 6 with one; then a step
				// samples the first token from the last, and the next hands
				// it out (one step ahead).
				want := 1 + 2
				if budget > 0 {
					want = (len(long)-1+budget-1)/budget + 2
				}
				if join { // the last chunk's step runs the last token in its decode
					want--
				}
				if steps != want {
					t.Errorf("the long prompt's first token came %d steps after its insertion, want %d", steps, want)
				}
				for !g.Done() {
					next()
				}
				for i, p := range prompts {
					alone, err := generate.Generate(m, p, generate.Options{MaxTokens: 24}, nil)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got[uids[i]], alone.Tokens) {
						t.Errorf("row %d (prompt length %d): batch gave %v, alone %v", i, len(p), got[uids[i]], alone.Tokens)
					}
				}
			})
		}
	}
}

// TestBatchGeneratorErrors: bad input is an error naming it, and nothing is
// queued.
func TestBatchGeneratorErrors(t *testing.T) {
	b := cpuBackend(t)
	m := batchCheckpoint(t, b, "fp-f32")
	g, err := generate.NewBatchGenerator(m, generate.BatchOptions{MaxSequences: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	bad := -1.0
	for _, c := range []struct {
		name    string
		prompts [][]int32
		seqs    []generate.SequenceOptions
		want    string
	}{
		{"empty", [][]int32{{1}, {}}, nil, "prompt 1: empty prompt"},
		{"vocab", [][]int32{{1, 5000}}, nil, "prompt 0: token 1 is 5000, want 0 <= id < vocabulary size 1000"},
		{"negative", [][]int32{{-2}}, nil, "token 0 is -2"},
		{"max-tokens", [][]int32{{1}}, []generate.SequenceOptions{{MaxTokens: -1}}, "max tokens is -1"},
		{"temp", [][]int32{{1}}, []generate.SequenceOptions{{Sampler: &generate.SamplerOptions{Temp: bad}}}, "temp is -1"},
		{"count", [][]int32{{1}, {2}}, []generate.SequenceOptions{{}}, "1 sequence options for 2 prompts"},
		{"limit", [][]int32{{1}, {2}, {3}, {4}}, nil, "4 sequences (0 held, 4 inserted) is over the configured limit of 3 (MaxSequences)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := g.Insert(c.prompts, c.seqs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
			if g.Len() != 0 {
				t.Errorf("%d sequences queued after a failed Insert", g.Len())
			}
		})
	}
	if _, err := generate.NewBatchGenerator(m, generate.BatchOptions{PrefillBatchSize: -1}); err == nil {
		t.Error("PrefillBatchSize -1: no error")
	}
	if _, err := generate.NewBatchGenerator(m, generate.BatchOptions{PrefillBudget: -1}); err == nil || !strings.Contains(err.Error(), "prefill budget is -1") {
		t.Errorf("PrefillBudget -1: %v, want an error naming it", err)
	}
	if _, err := generate.NewBatchGenerator(m, generate.BatchOptions{PrefillPadLimit: -1}); err == nil || !strings.Contains(err.Error(), "prefill pad limit is -1") {
		t.Errorf("PrefillPadLimit -1: %v, want an error naming it", err)
	}
}

// TestBatchRemove: removing a generating sequence and a queued one leaves
// the others' tokens as Generate gives them alone (greedy, CPU, float32),
// hands out no token of the removed ones after the call, and Close gives
// back every array the generator made.
func TestBatchRemove(t *testing.T) {
	// NoLogprobs: greedy rows are picked on the backend and kept there
	// between steps (the pipelined path), so Remove and Close must take
	// those arrays out too.
	for _, noLP := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoLogprobs=%v", noLP), func(t *testing.T) { testBatchRemove(t, noLP) })
	}
}

func testBatchRemove(t *testing.T, noLogprobs bool) {
	b := cpuBackend(t)
	m := batchCheckpoint(t, b, "optiq-f32")
	prompts := batchPrompts(m.VocabSize(), 6, 3, 9, 4, 2)
	before := b.Stats().LiveArrays
	g, err := generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: 8, PrefillStepSize: 4, PrefillBatchSize: 2, CompletionBatchSize: 3, NoLogprobs: noLogprobs})
	if err != nil {
		t.Fatal(err)
	}
	uids, err := g.Insert(prompts, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[int][]int32)
	removed := map[int]bool{}
	for step := 0; !g.Done(); step++ {
		toks, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			if removed[tk.UID] {
				t.Fatalf("step %d: token for removed sequence %d", step, tk.UID)
			}
			got[tk.UID] = append(got[tk.UID], tk.Token)
		}
		if step == 4 {
			// uid 0 is generating by now; uid 4 is still queued.
			if len(got[uids[0]]) == 0 {
				t.Fatalf("sequence 0 has no tokens after 5 steps: the test does not remove a generating row")
			}
			if err := g.Remove(uids[0], uids[4], 999); err != nil {
				t.Fatal(err)
			}
			removed[uids[0]], removed[uids[4]] = true, true
		}
	}
	if len(got[uids[4]]) != 0 {
		t.Errorf("queued sequence 4 generated %v before its removal", got[uids[4]])
	}
	for i := 1; i < 4; i++ {
		want, err := generate.Generate(m, prompts[i], generate.Options{MaxTokens: 8, PrefillStepSize: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[uids[i]], want.Tokens) {
			t.Errorf("sequence %d: got %v, alone %v", i, got[uids[i]], want.Tokens)
		}
	}
	g.Close()
	if after := b.Stats().LiveArrays; after != before {
		t.Errorf("live arrays: %d after Close, %d before the generator", after, before)
	}
	if _, err := g.Next(); err == nil {
		t.Error("Next after Close: no error")
	}

	// Closed mid-run, with rows prefilling, generating and queued.
	g, err = generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: 8, PrefillStepSize: 4, PrefillBatchSize: 2, CompletionBatchSize: 3, NoLogprobs: noLogprobs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Insert(prompts, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := g.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if b.Stats().LiveArrays == before {
		t.Fatal("no live arrays mid-run: the test does not check Close")
	}
	g.Close()
	if after := b.Stats().LiveArrays; after != before {
		t.Errorf("live arrays: %d after Close mid-run, %d before the generator", after, before)
	}
}

// TestBatchReturnCaches: a finished sequence's cache (ReturnCaches) holds
// its prompt and every token handed out: one more token through it gives,
// bit for bit on the CPU backend, the logits of the same token after a
// fresh prefill of prompt + tokens. Releasing the caches and closing the
// generator gives back every array.
func TestBatchReturnCaches(t *testing.T) {
	b := cpuBackend(t)
	m := batchCheckpoint(t, b, "optiq-f32")
	prompts := batchPrompts(m.VocabSize(), 6, 1, 9)
	before := b.Stats().LiveArrays
	g, err := generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: 5, PrefillStepSize: 4, PrefillBatchSize: 2, CompletionBatchSize: 2, ReturnCaches: true})
	if err != nil {
		t.Fatal(err)
	}
	uids, err := g.Insert(prompts, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[int][]int32{}
	caches := map[int][]nn.KVCache{}
	for !g.Done() {
		toks, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			tokens[tk.UID] = append(tokens[tk.UID], tk.Token)
			if (tk.FinishReason != "") != (tk.Cache != nil) {
				t.Fatalf("sequence %d: finish %q with %d cache layers", tk.UID, tk.FinishReason, len(tk.Cache))
			}
			if tk.Cache != nil {
				caches[tk.UID] = tk.Cache
			}
		}
	}
	g.Close()
	next := func(cache []nn.KVCache) []float32 {
		x := b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{7}))
		out, err := m.Forward(x, cache, minicpm5.ForwardOptions{})
		b.Release(x)
		if err != nil {
			t.Fatal(err)
		}
		d, err := b.ToHost(out.Logits)
		b.Release(out.Logits)
		if err != nil {
			t.Fatal(err)
		}
		return d.ToFloat32()
	}
	for i, u := range uids {
		c := caches[u]
		seq := append(slices.Clone(prompts[i]), tokens[u]...)
		if len(c) != len(m.Layers) || c[0].Offset() != len(seq) {
			t.Fatalf("sequence %d: %d cache layers at offset %d, want %d at %d", i, len(c), c[0].Offset(), len(m.Layers), len(seq))
		}
		got := next(c)
		fresh := m.NewCache()
		logits, err := m.Prefill(seq, fresh, 4)
		if err != nil {
			t.Fatal(err)
		}
		b.Release(logits)
		want := next(fresh)
		// A left-padded row's keys sit at other lanes of the fast SDPA's
		// 32-key blocks than the same keys alone, and its vector kernels
		// (AVX2, AVX-512) sum their scores and weights in trees over the
		// lanes (sdpa_fast.go), so the batch's cache holds K and V rounded
		// differently in the last bits (the portable loops, which sum in
		// order, give the same bits): the next logits agree to 1e-5 of
		// their scale, the argmax exactly.
		scale, diff := 0.0, 0.0
		for j := range want {
			scale = max(scale, math.Abs(float64(want[j])))
			diff = max(diff, math.Abs(float64(got[j]-want[j])))
		}
		if diff > 1e-5*scale || argmax(got) != argmax(want) {
			t.Errorf("sequence %d: the returned cache's next logits differ from a fresh prefill's by %g (scale %g), argmax %d vs %d", i, diff, scale, argmax(got), argmax(want))
		}
		for _, l := range append(c, fresh...) {
			l.Release()
		}
	}
	if after := b.Stats().LiveArrays; after != before {
		t.Errorf("live arrays: %d after releasing the caches, %d before", after, before)
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// TestBatchPrefix: sequences started from the caches of an earlier one
// (SequenceOptions.Prefix: all its tokens, or the first few) prefill only
// the rest of their prompts and give, greedy, what Generate gives for the
// whole prompt alone, in one batch with a sequence without a prefix; the
// prefix caches are copied (released right after Insert, the run goes on)
// and every array comes back once the generator is closed. A prefix that
// leaves no token to run is an error.
func TestBatchPrefix(t *testing.T) {
	b := cpuBackend(t)
	m := batchCheckpoint(t, b, "optiq-f32")
	before := b.Stats().LiveArrays
	first := batchPrompts(m.VocabSize(), 7)[0]
	res, err := generate.Generate(m, first, generate.Options{MaxTokens: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: 4, ReturnCaches: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Insert([][]int32{first}, nil); err != nil {
		t.Fatal(err)
	}
	var cache []nn.KVCache
	var held []int32
	for !g.Done() {
		toks, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			held = append(held, tk.Token)
			if tk.Cache != nil {
				cache = tk.Cache
			}
		}
	}
	g.Close()
	if !slices.Equal(held, res.Tokens) || cache == nil {
		t.Fatalf("first sequence: batch gave %v (cache %v), Generate %v", held, cache != nil, res.Tokens)
	}
	held = append(slices.Clone(first), held...) // the tokens cache holds
	prompts := [][]int32{
		append(slices.Clone(held), 11, 12, 13, 14, 15, 16), // all of the cache, then more
		append(slices.Clone(held[:5]), 40, 41),             // its first 5 tokens only
		batchPrompts(m.VocabSize(), 3)[0],                  // no prefix
		append(slices.Clone(held), 20),                     // all of it and one token
	}
	seqs := []generate.SequenceOptions{{Prefix: cache}, {Prefix: cache, PrefixTokens: 5}, {}, {Prefix: cache}}
	g, err = generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: 6, PrefillStepSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	uids, err := g.Insert(prompts, seqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cache {
		c.Release()
	}
	got := map[int][]int32{}
	for !g.Done() {
		toks, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			got[tk.UID] = append(got[tk.UID], tk.Token)
		}
	}
	if s := g.Stats(); s.PromptTokens != 5+1+2+0 {
		t.Errorf("prompt tokens prefilled: %d, want %d (the prompts' tokens past their prefix, the last excluded)", s.PromptTokens, 8)
	}
	g.Close()
	for i, p := range prompts {
		want, err := generate.Generate(m, p, generate.Options{MaxTokens: 6}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[uids[i]], want.Tokens) {
			t.Errorf("prompt %d: batch from a prefix gave %v, Generate alone %v", i, got[uids[i]], want.Tokens)
		}
	}
	if after := b.Stats().LiveArrays; after != before {
		t.Errorf("live arrays: %d after Close, %d before", after, before)
	}

	// Errors: nothing is queued, nothing leaks.
	fresh := m.NewCache()
	lg, err := m.Prefill(first, fresh, 4)
	if err != nil {
		t.Fatal(err)
	}
	b.Release(lg)
	g, err = generate.NewBatchGenerator(m, generate.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range []struct {
		prompt []int32
		o      generate.SequenceOptions
		want   string
	}{
		{first, generate.SequenceOptions{Prefix: fresh}, "a prefix of 7 tokens for a 7-token prompt"},
		{append(slices.Clone(first), 1), generate.SequenceOptions{Prefix: fresh, PrefixTokens: 9}, "prefix tokens 9, want 0 < n <= 7"},
		{append(slices.Clone(first), 1), generate.SequenceOptions{Prefix: fresh[:1]}, "1 prefix caches for a model of"},
	} {
		if _, err := g.Insert([][]int32{c.prompt}, []generate.SequenceOptions{c.o}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
	if g.Len() != 0 {
		t.Errorf("%d sequences queued after failed inserts", g.Len())
	}
	for _, c := range fresh {
		c.Release()
	}
}

// Under NoLogprobs a greedy batch picks on the backend: the same tokens as
// with the log-probabilities on the host, none handed out but for the
// sequence that asks for them (whose row is the one the default gives), and
// a sampled row in the batch brings the step back to the host.
func TestBatchNoLogprobs(t *testing.T) {
	b := cpuBackend(t)
	m := batchCheckpoint(t, b, "optiq-f32")
	prompts := batchPrompts(m.VocabSize(), 5, 9, 3)
	run := func(opts generate.BatchOptions, seqs []generate.SequenceOptions) map[int][]generate.BatchToken {
		t.Helper()
		g, err := generate.NewBatchGenerator(m, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		uids, err := g.Insert(prompts, seqs)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int][]generate.BatchToken{}
		for !g.Done() {
			toks, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range toks {
				i := slices.Index(uids, tk.UID)
				tk.Logprobs = slices.Clone(tk.Logprobs)
				out[i] = append(out[i], tk)
			}
		}
		return out
	}
	ids := func(ts []generate.BatchToken) []int32 {
		var v []int32
		for _, tk := range ts {
			v = append(v, tk.Token)
		}
		return v
	}
	want := run(generate.BatchOptions{MaxTokens: 6}, nil)
	got := run(generate.BatchOptions{MaxTokens: 6, NoLogprobs: true}, []generate.SequenceOptions{{}, {Logprobs: true}, {}})
	for i := range prompts {
		if !slices.Equal(ids(got[i]), ids(want[i])) {
			t.Errorf("row %d: NoLogprobs gave %v, want %v", i, ids(got[i]), ids(want[i]))
		}
		for j, tk := range got[i] {
			switch {
			case i == 1 && !slices.Equal(tk.Logprobs, want[i][j].Logprobs):
				t.Errorf("row 1 token %d: its asked-for logprobs differ from the default's", j)
			case i != 1 && tk.Logprobs != nil:
				t.Errorf("row %d token %d: got %d logprobs, want none under NoLogprobs", i, j, len(tk.Logprobs))
			}
		}
	}
	seed := uint64(3)
	sampled := []generate.SequenceOptions{{}, {Sampler: &generate.SamplerOptions{Temp: 0.8}, Seed: &seed}, {}}
	a := run(generate.BatchOptions{MaxTokens: 6}, sampled)
	c := run(generate.BatchOptions{MaxTokens: 6, NoLogprobs: true}, sampled)
	for i := range prompts {
		if !slices.Equal(ids(a[i]), ids(c[i])) {
			t.Errorf("with a sampled row, row %d: NoLogprobs gave %v, want %v", i, ids(c[i]), ids(a[i]))
		}
	}
}

// TestBatchSampledLogprobsUnfiltered: a sampled row hands out the model's
// log-probabilities, not the row its filters and temperature changed (the
// draw filters a row in place only when nobody reads it): each prompt's
// first row equals, bit for bit, the first row a greedy run of the same
// prompts hands out.
func TestBatchSampledLogprobsUnfiltered(t *testing.T) {
	b := cpuBackend(t)
	m := batchCheckpoint(t, b, "optiq-bf16")
	view := perRowView(t, m)
	prompts := batchPrompts(m.VocabSize(), 4, 9)
	first := func(so *generate.SamplerOptions) [][]float32 {
		seqs := make([]generate.SequenceOptions, len(prompts))
		for i := range seqs {
			seed := uint64(3 + i)
			seqs[i] = generate.SequenceOptions{MaxTokens: 2, Sampler: so, Seed: &seed}
		}
		rows := make([][]float32, len(prompts))
		_, _, err := generate.BatchGenerate(view, prompts, generate.BatchOptions{}, seqs, func(p int, tk generate.BatchToken) {
			if rows[p] == nil {
				rows[p] = slices.Clone(tk.Logprobs)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	greedy := first(nil)
	sampled := first(&generate.SamplerOptions{Temp: 3, TopP: 0.5, TopK: 5})
	for p := range prompts {
		if len(greedy[p]) == 0 || len(sampled[p]) != len(greedy[p]) {
			t.Fatalf("prompt %d: rows of %d and %d log-probabilities", p, len(sampled[p]), len(greedy[p]))
		}
		for j := range greedy[p] {
			if math.Float32bits(sampled[p][j]) != math.Float32bits(greedy[p][j]) {
				t.Fatalf("prompt %d, token %d: sampled row %v, greedy %v", p, j, sampled[p][j], greedy[p][j])
			}
		}
	}
}

// TestBatchPrefillPadLimit: with per-row caches, BatchOptions.PrefillPadLimit
// runs a prefill step's chunks of different lengths in forwards of their own
// groups rather than right-padded to the longest: at limit 1 the prefill
// forwards carry no padding at all (their token rows are exactly the prompt
// tokens prefilled), at 0 (mlx_lm's one padded forward) they carry more, and
// every row's tokens are what Generate gives it alone either way; on shared
// cache buffers the option does nothing.
func TestBatchPrefillPadLimit(t *testing.T) {
	b := cpuBackend(t)
	m := batchCheckpoint(t, b, "fp-f32")
	perRow := perRowView(t, m)
	prompts := batchPrompts(m.VocabSize(), 3, 17, 9, 16, 2, 11)
	for _, c := range []struct {
		name       string
		model      generate.BatchModel
		limit      int
		wantPadded bool
	}{
		{"per-row/limit0", perRow, 0, true},
		{"per-row/limit1", perRow, 1, false},
		{"per-row/limit4", perRow, 4, true},
		{"shared/limit1", m, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := generate.BatchOptions{MaxTokens: 5, PrefillStepSize: 8, PrefillBatchSize: 4, CompletionBatchSize: 4, PrefillPadLimit: c.limit}
			cm := &countingModel{BatchModel: c.model}
			got, st, err := generate.BatchGenerate(cm, prompts, opts, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if padded := cm.appendRows > st.PromptTokens; padded != c.wantPadded {
				t.Errorf("prefill forwards carried %d token rows (%d forwards) for %d prompt tokens: padded %v, want %v", cm.appendRows, cm.appends, st.PromptTokens, padded, c.wantPadded)
			}
			for i, p := range prompts {
				want, err := generate.Generate(m, p, generate.Options{MaxTokens: 5, PrefillStepSize: 8}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[i].Tokens, want.Tokens) {
					t.Errorf("row %d (prompt length %d): batch gave %v, alone %v", i, len(p), got[i].Tokens, want.Tokens)
				}
			}
		})
	}
}
