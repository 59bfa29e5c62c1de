package generate_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/synth"
	"github.com/mlxgo/mlxgo/tensor"
)

// head64Model writes and loads a tiny float32 synthetic checkpoint with
// head_dim 64 (the fixtures' 32 is not a TurboQuant head_dim) on the CPU
// backend b (nil: a new one); a seed other than 0 replaces the preset's.
func head64Model(t *testing.T, b backend.Backend, seed uint64) *minicpm5.Model {
	t.Helper()
	s := synth.Presets["tiny"]
	s.HeadDim, s.Heads, s.Quant, s.DType = 64, 4, "f32", tensor.F32
	if seed != 0 {
		s.Seed = seed
	}
	dir := t.TempDir()
	if err := synth.WriteMLX(dir, s, nil); err != nil {
		t.Fatal(err)
	}
	if b == nil {
		b = cpuBackend(t)
	}
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// rowKinds are the cache kinds a batch holds as one cache per row: the
// full cache with PerRow, the quantized cache converting at different
// points (from the start, part way through the prompts) and TurboQuant
// schemes read both ways.
var rowKinds = []struct {
	name string
	o    nn.CacheOptions
}{
	{"full-per-row", nn.CacheOptions{PerRow: true}},
	{"kv8g64-start0", nn.CacheOptions{KVBits: 8, KVGroupSize: 64}},
	{"kv4g32-start6", nn.CacheOptions{KVBits: 4, KVGroupSize: 32, QuantizedKVStart: 6}},
	{"turbo-k8v3", nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 8, VBits: 3}}},
	{"turbo-k4v2-eager", nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 4, VBits: 2}, TurboEager: true}},
	{"turbo-k2v5", nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 2, VBits: 5}}},
}

// TestBatchRowCachesForwardEqualsAlone: prompts of lengths 3, 7 and 1,
// right-padded into one [3, 7] prefill of a quantized or TurboQuant batch
// cache, then three decode steps of [3, 1]: each row's logits equal those
// of the prompt run alone through a cache of that kind, bit for bit (each
// row's cache holds only its tokens and attends as alone; every other
// kernel computes a row from that row's inputs).
func TestBatchRowCachesForwardEqualsAlone(t *testing.T) {
	m := head64Model(t, nil, 0)
	b := m.Backend()
	V := m.Config().VocabSize
	lengths, L := []int{3, 7, 1}, 7
	prompts := batchPrompts(V, lengths...)
	next := [][]int32{{11, 12, 13}, {21, 22, 23}, {31, 32, 33}}
	for _, k := range rowKinds {
		t.Run(k.name, func(t *testing.T) {
			view, err := m.WithCache(k.o)
			if err != nil {
				t.Fatal(err)
			}
			var batch [][]float32
			err = b.Do(func() (err error) {
				defer backend.Recover(&err)
				cache := view.NewBatchCache(make([]int, len(lengths)))
				defer func() {
					for _, c := range cache {
						c.Release()
					}
				}()
				pad := make([]int, len(lengths))
				ids := make([]int32, 0, len(lengths)*L)
				for r, p := range prompts {
					pad[r] = L - len(p)
					ids = append(append(ids, p...), make([]int32, pad[r])...)
				}
				for _, c := range cache {
					if err := c.PrepareRightPadding(pad); err != nil {
						return err
					}
				}
				x := b.FromHost(tensor.FromInt32(tensor.Shape{len(lengths), L}, ids))
				if err := view.BatchAppend(x, cache); err != nil {
					return err
				}
				for _, c := range cache {
					c.Finalize()
				}
				for s := range 3 {
					x := b.FromHost(tensor.FromInt32(tensor.Shape{len(lengths), 1}, []int32{next[0][s], next[1][s], next[2][s]}))
					logits, err := view.BatchLogits(x, cache)
					if err != nil {
						return err
					}
					d, err := b.ToHost(logits)
					if err != nil {
						return err
					}
					batch = append(batch, d.ToFloat32())
				}
				if got, want := cache[0].Offsets(), []int{6, 10, 4}; !slices.Equal(got, want) {
					t.Errorf("offsets %v, want %v", got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r, p := range prompts {
				want := aloneLogits(t, view, p, next[r])
				for st := range want {
					got := batch[st][r*V : (r+1)*V]
					for j := range V {
						if math.Float32bits(got[j]) != math.Float32bits(want[st][j]) {
							t.Fatalf("row %d step %d: logit %d is %v in the batch, %v alone", r, st, j, got[j], want[st][j])
						}
					}
				}
			}
		})
	}
}

// aloneLogits prefills p in one chunk through a fresh cache of view's kind,
// then feeds next one token at a time, and returns those steps' logits.
func aloneLogits(t *testing.T, view minicpm5.CacheView, p, next []int32) [][]float32 {
	t.Helper()
	var rows [][]float32
	b := view.Backend()
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		cache := view.NewCache()
		defer func() {
			for _, c := range cache {
				c.Release()
			}
		}()
		if err := generate.Prefill(view, cache, p, 16); err != nil {
			return err
		}
		for _, tok := range next {
			x := b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{tok}))
			logits, err := view.LastLogits(x, cache)
			if err != nil {
				return err
			}
			d, err := b.ToHost(logits)
			if err != nil {
				return err
			}
			rows = append(rows, d.ToFloat32())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestBatchRowCachesEqualAlone runs the batch generator on a quantized or
// TurboQuant cache with prompts that are chunked, queued, join while others
// decode and leave at different steps, half greedy and half sampled with a
// seed of their own: every row hands out the tokens Generate gives that
// prompt alone on a cache of that kind (the sampled rows draw from a random
// state of their own, so their tokens too must be the prompt's alone).
func TestBatchRowCachesEqualAlone(t *testing.T) {
	m := head64Model(t, nil, 0)
	V := m.Config().VocabSize
	prompts := batchPrompts(V, 3, 9, 1, 14, 6)
	maxTokens := []int{5, 8, 3, 6, 7}
	for _, k := range rowKinds {
		t.Run(k.name, func(t *testing.T) {
			view, err := m.WithCache(k.o)
			if err != nil {
				t.Fatal(err)
			}
			g, err := generate.NewBatchGenerator(view, generate.BatchOptions{PrefillStepSize: 4, PrefillBatchSize: 2, CompletionBatchSize: 3, ReturnCaches: true})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			seqs := make([]generate.SequenceOptions, len(prompts))
			for i := range seqs {
				seqs[i].MaxTokens = maxTokens[i]
				if i%2 == 1 {
					seed := uint64(40 + i)
					seqs[i].Sampler, seqs[i].Seed = &generate.SamplerOptions{Temp: 0.8}, &seed
				}
			}
			uids, err := g.Insert(prompts, seqs)
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]int32, len(prompts))
			for {
				toks, err := g.NextGenerated()
				if err != nil {
					t.Fatal(err)
				}
				if len(toks) == 0 {
					break
				}
				for _, tk := range toks {
					i := slices.Index(uids, tk.UID)
					got[i] = append(got[i], tk.Token)
					if tk.FinishReason != "" {
						if len(tk.Cache) != m.Config().NumHiddenLayers || tk.Cache[0].Offset() != len(prompts[i])+len(got[i]) {
							t.Errorf("prompt %d: returned cache of %d layers at offset %d, want %d at %d", i, len(tk.Cache), tk.Cache[0].Offset(), m.Config().NumHiddenLayers, len(prompts[i])+len(got[i]))
						}
						_ = m.Backend().Do(func() error {
							for _, c := range tk.Cache {
								c.Release()
							}
							return nil
						})
					}
				}
			}
			for i, p := range prompts {
				o := generate.Options{MaxTokens: maxTokens[i], PrefillStepSize: 4}
				if seqs[i].Sampler != nil {
					o.Sampler = *seqs[i].Sampler
					o.Sampler.Seed = *seqs[i].Seed
				}
				res, err := generate.Generate(view, p, o, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[i], res.Tokens) {
					t.Errorf("prompt %d (%d tokens): batch row %v, alone %v", i, len(p), got[i], res.Tokens)
				}
			}
		})
	}
}

// TestBatchRotatingReturnCaches: a batch on rotating caches (window 8, some
// prompts longer) hands each finished sequence its cache as mlx_lm's
// BatchRotatingKVCache.extract does: a RotatingKVCache of window 8 and keep
// 0 at the sequence's offset, holding its last min(offset, 8) tokens.
func TestBatchRotatingReturnCaches(t *testing.T) {
	m, b := loadTiny(t, "optiq-f32")
	view, err := m.WithCache(nn.CacheOptions{MaxKVSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	g, err := generate.NewBatchGenerator(view, generate.BatchOptions{PrefillStepSize: 4, PrefillBatchSize: 2, CompletionBatchSize: 2, ReturnCaches: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	prompts := batchPrompts(m.Config().VocabSize, 3, 12, 5)
	maxTokens := []int{4, 6, 9}
	seqs := make([]generate.SequenceOptions, len(prompts))
	for i := range seqs {
		seqs[i].MaxTokens = maxTokens[i]
	}
	uids, err := g.Insert(prompts, seqs)
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for {
		toks, err := g.NextGenerated()
		if err != nil {
			t.Fatal(err)
		}
		if len(toks) == 0 {
			break
		}
		for _, tk := range toks {
			if tk.FinishReason == "" {
				continue
			}
			done++
			i := slices.Index(uids, tk.UID)
			off := len(prompts[i]) + maxTokens[i]
			for l, c := range tk.Cache {
				rc, ok := c.(*nn.RotatingKVCache)
				if !ok {
					t.Fatalf("prompt %d layer %d: returned a %T, want *nn.RotatingKVCache", i, l, c)
				}
				if slots := rc.State()[0].Shape()[2]; rc.Offset() != off || rc.Keep() != 0 || rc.MaxSize() != 8 || slots != min(off, 8) {
					t.Errorf("prompt %d layer %d: offset %d, keep %d, window %d, %d slots; want %d, 0, 8, %d", i, l, rc.Offset(), rc.Keep(), rc.MaxSize(), slots, off, min(off, 8))
				}
			}
			_ = b.Do(func() error {
				for _, c := range tk.Cache {
					c.Release()
				}
				return nil
			})
		}
	}
	if done != len(prompts) {
		t.Errorf("%d sequences finished, want %d", done, len(prompts))
	}
}

// TestBatchRowCachesPrefix: a sequence inserted with the caches of its
// prompt's first tokens (SequenceOptions.Prefix, all of them or the first
// PrefixTokens) into a quantized or TurboQuant batch continues from a fork
// of those caches: its tokens equal a fork of the session that made them,
// trimmed alike, generating the rest of the prompt alone; a prefix of
// another kind is an error naming it.
func TestBatchRowCachesPrefix(t *testing.T) {
	m := head64Model(t, nil, 0)
	V := m.Config().VocabSize
	full := batchPrompts(V, 14)[0]
	other := batchPrompts(V, 5)[0]
	for _, k := range rowKinds[:4] {
		t.Run(k.name, func(t *testing.T) {
			view, err := m.WithCache(k.o)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := generate.NewSession[nn.KVCache](view)
			defer s.Release()
			if err := s.Append(full[:9], 4); err != nil {
				t.Fatal(err)
			}
			opts := generate.Options{MaxTokens: 6, PrefillStepSize: 4}
			for _, use := range []int{0, 6} {
				n := 9
				if use > 0 {
					n = use
				}
				f, err := s.Fork()
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Trim(n); err != nil {
					t.Fatal(err)
				}
				want, err := f.Generate(full[n:], opts, nil)
				f.Release()
				if err != nil {
					t.Fatal(err)
				}
				g, err := generate.NewBatchGenerator(view, generate.BatchOptions{PrefillStepSize: 4})
				if err != nil {
					t.Fatal(err)
				}
				uids, err := g.Insert([][]int32{other, full}, []generate.SequenceOptions{{MaxTokens: 6}, {MaxTokens: 6, Prefix: s.Caches(), PrefixTokens: use}})
				if err != nil {
					t.Fatal(err)
				}
				var got []int32
				for {
					toks, err := g.NextGenerated()
					if err != nil {
						t.Fatal(err)
					}
					if len(toks) == 0 {
						break
					}
					for _, tk := range toks {
						if tk.UID == uids[1] {
							got = append(got, tk.Token)
						}
					}
				}
				g.Close()
				if !slices.Equal(got, want.Tokens) {
					t.Errorf("prefix of %d tokens: batch row %v, the session alone %v", n, got, want.Tokens)
				}
			}
			if s.Len() != 9 {
				t.Errorf("the session holds %d tokens after the batches, want 9 (Insert copies the prefix)", s.Len())
			}
		})
	}
	// Caches of another kind than the batch's.
	view, _ := m.WithCache(nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 8, VBits: 3}})
	plain, _ := generate.NewSession[nn.KVCache](m)
	defer plain.Release()
	if err := plain.Append(full[:9], 4); err != nil {
		t.Fatal(err)
	}
	g, _ := generate.NewBatchGenerator(view, generate.BatchOptions{})
	defer g.Close()
	_, err := g.Insert([][]int32{full}, []generate.SequenceOptions{{Prefix: plain.Caches()}})
	if err == nil || !strings.Contains(err.Error(), "prefix cache 0: batch cache: a turbo:k8v3 TurboQuant batch is seeded from a cache of its kind, not a *nn.FullKVCache") {
		t.Errorf("a full prefix for a turbo batch: got %v", err)
	}
}
