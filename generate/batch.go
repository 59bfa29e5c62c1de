package generate

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// BatchModel is what the batch generator needs from a language model
// (models/minicpm5 has it).
type BatchModel interface {
	// Backend is the backend the model's arrays live on.
	Backend() backend.Backend
	// VocabSize bounds token ids: 0 <= id < VocabSize.
	VocabSize() int
	// NewBatchCache returns an empty batch cache per layer, one row per
	// entry of leftPadding.
	NewBatchCache(leftPadding []int) []*nn.BatchKVCache
	// BatchAppend runs ids (int32 [B, L]) through the model, appending them
	// to cache, without the head: a prefill chunk.
	BatchAppend(ids backend.Array, cache []*nn.BatchKVCache) error
	// BatchLogits runs ids (int32 [B, L]) through the model, appending them
	// to cache, and returns the logits of each row's last position, [B, V]
	// or [B, 1, V], in the model's dtype (BF16, F16 or F32).
	BatchLogits(ids backend.Array, cache []*nn.BatchKVCache) (backend.Array, error)
	// Both may open scopes of their own; what they return, and the caches'
	// new arrays, belong to the scope open when they are called.
}

// BatchOptions configure a BatchGenerator: mlx_lm's BatchGenerator
// arguments plus the shared random seed. The zero value is greedy decoding
// of up to 128 tokens per sequence with no stop tokens, 32 sequences
// decoding at once and 8 prefilled at once, in chunks of 2048 tokens.
type BatchOptions struct {
	// MaxTokens is the default per-sequence limit; 0 means 128
	// (BatchGenerator's max_tokens).
	MaxTokens int
	// StopTokens are the default stop tokens (the tokenizer's EOS ids).
	StopTokens []int32
	// Sampler is the default sampler; its Seed is ignored (see Seed).
	Sampler SamplerOptions
	// Processors are the default logits processors.
	Processors ProcessorOptions
	// Seed seeds the random state shared by every sequence that has no
	// seed of its own, as mx.random.seed(Seed) before mlx_lm's run: each
	// decode step draws one key per sampled row, in row order.
	Seed uint64
	// CompletionBatchSize is the most sequences decoding at once; more wait
	// in a queue (completion_batch_size; 0 means 32). It is raised to
	// PrefillBatchSize when smaller, as mlx_lm does.
	CompletionBatchSize int
	// PrefillBatchSize is the most prompts prefilled at once
	// (prefill_batch_size; 0 means 8).
	PrefillBatchSize int
	// PrefillStepSize is the prompt chunk length (0 means 2048).
	PrefillStepSize int
	// PrefillBudget, when positive, bounds the prompt tokens a step
	// prefills while sequences are generating (chunked prefill, as vLLM's
	// max_num_batched_tokens): each of the n prefilling rows then runs
	// min(PrefillStepSize, max(1, PrefillBudget/n)) tokens, so a long
	// prompt is prefilled over several steps and the generating rows
	// decode between them instead of waiting for it whole. While nothing
	// generates, chunks are PrefillStepSize long. 0 means no budget:
	// PrefillStepSize tokens per row every step (mlx_lm's BatchGenerator).
	PrefillBudget int
	// PrefillPadLimit, when positive and the model's batch caches hold a
	// cache per row (nn.CacheOptions.PerRow, or an encoded kind), splits a
	// prefill step whose chunks differ in length: a chunk at least
	// PrefillPadLimit tokens shorter than the longest runs in a forward of
	// its own group instead of right-padded to the longest (rows sorted by
	// chunk length, longest first; each group takes the rows within
	// PrefillPadLimit-1 tokens of its first). Padding is work the forward
	// does and throws away, where each extra forward costs one more pass
	// over the weights; a row's tokens are the same either way. 0 means one
	// padded forward for every step (mlx_lm's BatchGenerator).
	PrefillPadLimit int
	// MaxSequences, when positive, bounds the sequences a generator holds
	// (queued, prefilling and decoding): Insert fails rather than exceed it.
	MaxSequences int
	// ReturnCaches hands each finished sequence's cache to the caller
	// (BatchToken.Cache, mlx_lm's prompt_cache of a finished response).
	ReturnCaches bool
	// NoLogprobs leaves BatchToken.Logprobs nil (but for sequences that
	// ask for them, SequenceOptions.Logprobs). A decode step whose rows
	// all decode greedily, without logits processors and without asking
	// for log-probabilities, then takes the argmax on the backend and
	// copies only the row's tokens to the host, where otherwise the whole
	// [B, V] log-probabilities come over to be sampled there: the same
	// tokens (the argmax of the same array, ties to the smallest index).
	NoLogprobs bool
	// JoinPrefilled moves a sequence whose prompt is prefilled straight
	// into the generating rows, its last prompt token their next decode
	// input, so that the token that gives its first generated one runs in
	// a decode step with the other rows; mlx_lm's BatchGenerator (and the
	// default) runs that token through the model in a forward of the
	// joining rows alone first, which costs a whole pass over the weights
	// each time sequences join. A call to Next then also does its prompt
	// work (admitting, prefilling, joining) before its decode step rather
	// than after, so the first token comes out one step sooner. A row gets
	// the same tokens where the backend computes each row as it computes
	// it alone (the cpu backend with per-row caches, nn.CacheOptions.PerRow);
	// rows sampling from the shared random state draw in another order.
	JoinPrefilled bool
}

// SequenceOptions override BatchOptions for one inserted sequence (the
// per-sequence arguments of BatchGenerator.insert). The zero value takes
// every default.
type SequenceOptions struct {
	// MaxTokens is this sequence's limit; 0 means BatchOptions.MaxTokens.
	MaxTokens int
	// Sampler, when not nil, replaces the default sampler; its Seed is
	// ignored (see Seed).
	Sampler *SamplerOptions
	// Seed, when not nil, gives the sequence a random state of its own,
	// seeded with *Seed, so its tokens do not depend on the other rows
	// (and equal Generate's with that seed). nil draws from the shared
	// state (BatchOptions.Seed), as every sampler does in mlx_lm.
	Seed *uint64
	// Processors, when not nil, replace the default logits processors.
	Processors *ProcessorOptions
	// StopTokens, when not nil, replace the default stop tokens (an empty
	// non-nil slice: none).
	StopTokens []int32
	// Prefix, when not nil, holds the caches of the prompt's first tokens,
	// one per layer (a *nn.FullKVCache, or for a batch of quantized or
	// TurboQuant row caches one of that kind: nn.BatchKVCache.SeedRow),
	// all at one Offset n with
	// 0 < n < len(prompt) (a finished sequence's BatchToken.Cache, a
	// session's caches): the sequence starts from a copy of their first n
	// slots and only the rest of the prompt is prefilled (mlx_lm's insert
	// with caches). Insert copies them; the caller keeps them. The tokens
	// they hold are not checked: they must be prompt[:n].
	Prefix []nn.KVCache
	// Logprobs keeps this sequence's BatchToken.Logprobs under
	// BatchOptions.NoLogprobs.
	Logprobs bool
	// PrefixTokens, when positive, uses only the first PrefixTokens tokens
	// of Prefix (n above), which may hold more (a longer sequence that
	// shares only that much with the prompt); 0 uses them all.
	PrefixTokens int
}

// BatchToken is one generated token of one sequence, as BatchGenerator's
// responses carry it.
type BatchToken struct {
	// UID identifies the sequence (Insert returned it).
	UID int
	// Token is the token id. A token with FinishReason FinishStop is the
	// stop token itself.
	Token int32
	// Logprobs is the row of log-probabilities the token was sampled from
	// (after the logits processors), [V], exactly the model dtype's values.
	// It is a window on the step's [B, V] host buffer: copy it to keep one
	// row without the others. nil under BatchOptions.NoLogprobs (unless
	// the sequence asked for them with SequenceOptions.Logprobs).
	Logprobs []float32
	// FinishReason is "" while the sequence goes on, else FinishStop or
	// FinishLength; the sequence is then gone from the generator.
	FinishReason string
	// Cache, with BatchOptions.ReturnCaches and a FinishReason, is the
	// sequence's cache, one per layer (BatchKVCache.Extract: a FullKVCache,
	// a RotatingKVCache, or the row's quantized or TurboQuant cache):
	// its prompt and every token handed out, this one included, which a
	// one-sequence generation can continue. It belongs to the caller, who
	// releases it. (It may share memory with the batch's buffers until
	// those are freed: slices on a lazy backend.)
	Cache []nn.KVCache
}

// BatchStats count a generator's work since it was made.
type BatchStats struct {
	PromptTokens     int           // prompt tokens prefilled: padding and each prompt's last token (the first decode input) not counted, as mlx_lm's prompt_tokens
	PromptTime       time.Duration // time in prefill
	GenerationTokens int           // tokens handed out by Next
	GenerationTime   time.Duration // time in decode steps
	GenerationSteps  int           // decode steps run (GenerationTokens / GenerationSteps: rows a step)
	PeakBytes        int64         // the backend's peak live bytes
}

// PromptTPS is prompt tokens per second of prefill (0 if no time).
func (s BatchStats) PromptTPS() float64 { return rate(s.PromptTokens, s.PromptTime) }

// GenerationTPS is the aggregate decode rate, generated tokens of all
// sequences per second of decode steps (0 if no time).
func (s BatchStats) GenerationTPS() float64 { return rate(s.GenerationTokens, s.GenerationTime) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// BatchGenerator is continuous batching with mlx_lm's BatchGenerator
// semantics: sequences are inserted (Insert) into a queue; each Next call
// first runs one decode step of the sequences generating, then moves up to
// PrefillBatchSize queued prompts into prefill (while fewer than
// CompletionBatchSize generate), starts generating those whose prompt is
// done, and prefills one chunk of the rest (of at most PrefillBudget tokens
// in all while sequences generate). Prompts of different lengths are
// prefilled together right-padded (nn.BatchKVCache turns that into left
// padding); sequences join the generating batch while others decode
// (nn.BatchKVCache.Extend) and leave it when they finish or are removed
// (Filter). A decode step runs the model on every generating row at once,
// applies each row's logits processors, computes logprobs and samples each
// row with its own sampler, in row order, one step ahead of the tokens Next
// hands out (as GenerationBatch._step does).
//
// Sampling differs from mlx_lm in one case: when every sequence shares one
// sampler object with temperature > 0 and more than one row generates,
// mlx_lm samples all rows in one call, which uses Gumbel-max noise over
// [B, V]; the generator always samples row by row (the single-row inverse
// CDF), which is what mlx_lm does when each sequence has its own sampler.
// Stop conditions are single tokens (mlx_lm also accepts multi-token stop
// sequences). A sequence may start from a cache of its prompt's first
// tokens (SequenceOptions.Prefix, insert's caches): a copy of it joins the
// prefilling rows as a row of its own, left-padded to theirs. Finished
// sequences' caches are returned with BatchOptions.ReturnCaches.
//
// A BatchGenerator is not safe for concurrent use. Its methods run their
// backend work on the backend's thread (Backend.Do). Close releases it.
type BatchGenerator struct {
	m      BatchModel
	b      backend.Backend
	opts   BatchOptions
	vocab  int
	rng    *RNG
	uid    int
	queue  []*batchSeq
	prompt batchPart // prefilling
	gen    batchPart // generating
	ready  batchPart // split off the prefilling rows, joining the generating
	stats  BatchStats
	err    error           // a failed forward leaves the caches invalid
	handed []backend.Array // arrays of returned caches, kept out of the step's scope
	rows   []float32       // a host decode step's rows of log-probabilities, reused (backend.HostReader)
}

// batchPart is a set of rows sharing batch caches (nil when it has none).
type batchPart struct {
	rows  []*batchSeq
	cache []*nn.BatchKVCache
	// next holds the rows' next tokens ([B] int32 on the backend) when the
	// last step picked them there (every row greedy, without processors or
	// log-probabilities); the rows' next fields are stale then. The next
	// step is built on them and started before they are read back, as
	// mlx_lm's GenerationBatch keeps its tokens lazy behind async_eval.
	next backend.Array
}

type batchSeq struct {
	uid        int
	rest       []int32 // prompt tokens not yet prefilled, the last excluded
	last       int32   // the last prompt token: the first decode input
	maxTokens  int
	sampler    *Sampler
	processors ProcessorOptions
	stop       []int32
	context    []int32 // the tokens in the cache (the processors' history)
	n          int     // tokens handed out
	next       int32   // the next decode input: last, then the token sampled and not yet handed out
	nextLP     []float32
	primed     bool               // next is the last prompt token (BatchOptions.JoinPrefilled): its step hands nothing out
	wantLP     bool               // BatchToken.Logprobs wanted (not BatchOptions.NoLogprobs, or SequenceOptions.Logprobs)
	prefix     []*nn.BatchKVCache // one-row caches of SequenceOptions.Prefix while queued; nil otherwise
}

// NewBatchGenerator returns an empty generator for m. Invalid options are
// an error naming the option.
func NewBatchGenerator(m BatchModel, opts BatchOptions) (*BatchGenerator, error) {
	if opts.MaxTokens == 0 {
		opts.MaxTokens = 128
	}
	if opts.PrefillBatchSize == 0 {
		opts.PrefillBatchSize = 8
	}
	if opts.CompletionBatchSize == 0 {
		opts.CompletionBatchSize = 32
	}
	if opts.PrefillStepSize == 0 {
		opts.PrefillStepSize = 2048
	}
	switch {
	case opts.MaxTokens < 0:
		return nil, fmt.Errorf("generate: batch max tokens is %d, want > 0 (0 = 128)", opts.MaxTokens)
	case opts.PrefillBatchSize < 0:
		return nil, fmt.Errorf("generate: prefill batch size is %d, want > 0 (0 = 8)", opts.PrefillBatchSize)
	case opts.CompletionBatchSize < 0:
		return nil, fmt.Errorf("generate: completion batch size is %d, want > 0 (0 = 32)", opts.CompletionBatchSize)
	case opts.PrefillStepSize < 0:
		return nil, fmt.Errorf("generate: prefill step size is %d, want > 0 (0 = 2048)", opts.PrefillStepSize)
	case opts.PrefillBudget < 0:
		return nil, fmt.Errorf("generate: prefill budget is %d, want >= 0 (0 = none)", opts.PrefillBudget)
	case opts.PrefillPadLimit < 0:
		return nil, fmt.Errorf("generate: prefill pad limit is %d, want >= 0 (0 = none)", opts.PrefillPadLimit)
	case opts.MaxSequences < 0:
		return nil, fmt.Errorf("generate: max sequences is %d, want >= 0 (0 = no limit)", opts.MaxSequences)
	}
	opts.CompletionBatchSize = max(opts.CompletionBatchSize, opts.PrefillBatchSize)
	if err := opts.Processors.validate(); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if _, err := NewSampler(opts.Sampler); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	b := m.Backend()
	if b == nil {
		return nil, errors.New("generate: the model has no backend")
	}
	return &BatchGenerator{m: m, b: b, opts: opts, vocab: m.VocabSize(), rng: NewRNG(opts.Seed)}, nil
}

// Insert queues prompts (token ids) and returns their uids, in order. seqs
// is nil (every default) or holds one SequenceOptions per prompt. Nothing is
// queued when any prompt or option is invalid: an empty prompt, a token
// outside the vocabulary, a negative max tokens, a bad sampler or
// processor setting, or more sequences than MaxSequences.
func (g *BatchGenerator) Insert(prompts [][]int32, seqs []SequenceOptions) ([]int, error) {
	if g.err != nil {
		return nil, g.err
	}
	if seqs != nil && len(seqs) != len(prompts) {
		return nil, fmt.Errorf("generate: %d sequence options for %d prompts", len(seqs), len(prompts))
	}
	if lim := g.opts.MaxSequences; lim > 0 {
		if n := g.Len() + len(prompts); n > lim {
			return nil, fmt.Errorf("generate: %d sequences (%d held, %d inserted) is over the configured limit of %d (MaxSequences)", n, g.Len(), len(prompts), lim)
		}
	}
	pending := make([]*batchSeq, len(prompts))
	for i, p := range prompts {
		var o SequenceOptions
		if seqs != nil {
			o = seqs[i]
		}
		s, err := g.newSeq(p, o)
		if err != nil {
			return nil, fmt.Errorf("generate: prompt %d: %w", i, err)
		}
		pending[i] = s
	}
	if err := g.copyPrefixes(pending, prompts, seqs); err != nil {
		return nil, err
	}
	uids := make([]int, len(pending))
	for i, s := range pending {
		s.uid = g.uid
		uids[i] = g.uid
		g.uid++
	}
	g.queue = append(g.queue, pending...)
	return uids, nil
}

func (g *BatchGenerator) newSeq(p []int32, o SequenceOptions) (*batchSeq, error) {
	if len(p) == 0 {
		return nil, errors.New("empty prompt, want at least one token")
	}
	for i, id := range p {
		if id < 0 || int(id) >= g.vocab {
			return nil, fmt.Errorf("token %d is %d, want 0 <= id < vocabulary size %d", i, id, g.vocab)
		}
	}
	s := &batchSeq{rest: slices.Clone(p[:len(p)-1]), last: p[len(p)-1], maxTokens: o.MaxTokens,
		processors: g.opts.Processors, stop: g.opts.StopTokens, wantLP: !g.opts.NoLogprobs || o.Logprobs}
	switch {
	case s.maxTokens == 0:
		s.maxTokens = g.opts.MaxTokens
	case s.maxTokens < 0:
		return nil, fmt.Errorf("max tokens is %d, want > 0 (0 = the default %d)", o.MaxTokens, g.opts.MaxTokens)
	}
	if o.Processors != nil {
		if err := o.Processors.validate(); err != nil {
			return nil, err
		}
		s.processors = *o.Processors
	}
	if o.StopTokens != nil {
		s.stop = slices.Clone(o.StopTokens)
	}
	so := g.opts.Sampler
	if o.Sampler != nil {
		so = *o.Sampler
	}
	sm, err := NewSampler(so)
	if err != nil {
		return nil, err
	}
	sm.rng = g.rng
	if o.Seed != nil {
		sm.rng = NewRNG(*o.Seed)
	}
	s.sampler = sm
	return s, nil
}

// copyPrefixes gives each pending sequence with a SequenceOptions.Prefix a
// one-row batch cache holding a copy of it, and moves its first tokens from
// rest to context. On an error no sequence keeps a copy.
func (g *BatchGenerator) copyPrefixes(pending []*batchSeq, prompts [][]int32, seqs []SequenceOptions) error {
	if seqs == nil {
		return nil
	}
	for i, o := range seqs {
		if o.Prefix == nil {
			continue
		}
		n, err := prefixLen(o.Prefix, o.PrefixTokens, len(prompts[i]))
		if err != nil {
			return fmt.Errorf("generate: prompt %d: %w", i, err)
		}
		s := pending[i]
		s.context = slices.Clone(prompts[i][:n])
		s.rest = s.rest[n:]
	}
	err := g.b.Do(func() (err error) {
		defer backend.Recover(&err)
		sc := g.b.Scope()
		defer sc.Close()
		defer func() {
			for _, s := range pending {
				for _, c := range s.prefix {
					sc.Keep(c.State()...)
				}
			}
		}()
		for i, o := range seqs {
			if o.Prefix == nil {
				continue
			}
			s := pending[i]
			s.prefix = g.m.NewBatchCache([]int{0})
			if len(s.prefix) != len(o.Prefix) {
				return fmt.Errorf("generate: prompt %d: %d prefix caches for a model of %d layers", i, len(o.Prefix), len(s.prefix))
			}
			n := len(s.context)
			for l, c := range o.Prefix {
				if err := s.prefix[l].SeedRow(c, n); err != nil {
					return fmt.Errorf("generate: prompt %d: prefix cache %d: %w", i, l, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		_ = g.b.Do(func() (err error) {
			defer backend.Recover(&err)
			for _, s := range pending {
				release(s.prefix)
				s.prefix = nil
			}
			return nil
		})
	}
	return err
}

// prefixLen checks a SequenceOptions.Prefix of which use tokens are wanted
// (0: all) for a prompt of m tokens and returns how many it gives.
func prefixLen(prefix []nn.KVCache, use, m int) (int, error) {
	held := prefix[0].Offset()
	for l, c := range prefix {
		if c.Offset() != held {
			return 0, fmt.Errorf("prefix cache %d holds %d tokens, cache 0 holds %d", l, c.Offset(), held)
		}
		if c.State() == nil {
			return 0, fmt.Errorf("prefix cache %d is empty", l)
		}
	}
	n := held
	if use != 0 {
		if use < 0 || use > held {
			return 0, fmt.Errorf("prefix tokens %d, want 0 < n <= %d (the tokens the prefix caches hold)", use, held)
		}
		n = use
	}
	if n < 1 || n >= m {
		return 0, fmt.Errorf("a prefix of %d tokens for a %d-token prompt, want 0 < n < %d (one token at least left to run)", n, m, m)
	}
	return n, nil
}

// Len returns the number of sequences held: queued, prefilling or
// generating.
func (g *BatchGenerator) Len() int { return len(g.queue) + len(g.prompt.rows) + len(g.gen.rows) }

// Stats returns the work counted so far.
func (g *BatchGenerator) Stats() BatchStats {
	s := g.stats
	s.PeakBytes = g.b.Stats().PeakBytes
	return s
}

// Remove drops the sequences uids wherever they are (queued, prefilling or
// generating) and frees their rows of the caches; unknown uids are ignored.
func (g *BatchGenerator) Remove(uids ...int) error {
	if g.err != nil {
		return g.err
	}
	drop := map[int]bool{}
	for _, u := range uids {
		drop[u] = true
	}
	var gone []*batchSeq
	g.queue = slices.DeleteFunc(g.queue, func(s *batchSeq) bool {
		if drop[s.uid] {
			gone = append(gone, s)
		}
		return drop[s.uid]
	})
	err := g.run(func() error {
		for _, s := range gone {
			release(s.prefix)
			s.prefix = nil
		}
		for _, p := range []*batchPart{&g.prompt, &g.gen} {
			var keep []int
			for i, s := range p.rows {
				if !drop[s.uid] {
					keep = append(keep, i)
				}
			}
			if len(keep) < len(p.rows) {
				if err := g.filter(p, keep); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		g.err = err
	}
	return err
}

// Next runs one step (see BatchGenerator) and returns the tokens it hands
// out, one per sequence that was generating, in row order; it is empty
// while the first prompts are prefilled. Done reports when nothing is left.
func (g *BatchGenerator) Next() ([]BatchToken, error) {
	if g.err != nil {
		return nil, g.err
	}
	var out []BatchToken
	err := g.run(func() error {
		var err error
		out, _, err = g.next()
		return err
	})
	if err != nil {
		g.err = err
		return nil, err
	}
	return out, nil
}

// NextGenerated calls Next until it hands out tokens or nothing is left
// (mlx_lm's next_generated); an empty result means every sequence finished.
func (g *BatchGenerator) NextGenerated() ([]BatchToken, error) {
	if g.err != nil {
		return nil, g.err
	}
	var out []BatchToken
	err := g.run(func() error {
		for {
			toks, prompted, err := g.next()
			if err != nil || len(toks) > 0 || !prompted {
				out = toks
				return err
			}
		}
	})
	if err != nil {
		g.err = err
		return nil, err
	}
	return out, nil
}

// Done reports whether no sequence is left.
func (g *BatchGenerator) Done() bool { return g.Len() == 0 }

// Close releases the caches. The generator cannot be used afterwards.
func (g *BatchGenerator) Close() {
	_ = g.b.Do(func() (err error) {
		defer backend.Recover(&err)
		for _, p := range []*batchPart{&g.prompt, &g.gen, &g.ready} {
			release(p.cache)
			g.b.Release(p.next)
			*p = batchPart{}
		}
		for _, s := range g.queue {
			release(s.prefix)
			s.prefix = nil
		}
		return nil
	})
	g.queue = nil
	if g.err == nil {
		g.err = errors.New("generate: the batch generator is closed")
	}
}

func release(cache []*nn.BatchKVCache) {
	for _, c := range cache {
		c.Release()
	}
}

// run runs fn on the backend's thread inside a scope, turning an op's
// panic into an error, and keeps the caches' arrays out of the scope.
func (g *BatchGenerator) run(fn func() error) error {
	return g.b.Do(func() (err error) {
		defer backend.Recover(&err)
		sc := g.b.Scope()
		defer sc.Close()
		defer func() {
			sc.Keep(g.states()...)
			sc.Keep(g.handed...)
			g.handed = nil
		}()
		return fn()
	})
}

func (g *BatchGenerator) states() []backend.Array {
	var out []backend.Array
	for _, p := range []*batchPart{&g.prompt, &g.gen, &g.ready} {
		for _, c := range p.cache {
			out = append(out, c.State()...)
		}
		if p.next != nil {
			out = append(out, p.next)
		}
	}
	for _, s := range g.queue {
		for _, c := range s.prefix {
			out = append(out, c.State()...)
		}
	}
	return out
}

// next is BatchGenerator._next: it returns the generated tokens and whether
// any prompt work happened (mlx_lm's prompt responses).
func (g *BatchGenerator) next() (out []BatchToken, prompted bool, err error) {
	if g.opts.JoinPrefilled {
		// Prompts first: a row that joins runs its last prompt token in
		// this step's forward.
		if prompted, err = g.promptStep(); err != nil {
			return nil, false, err
		}
	}
	if len(g.gen.rows) > 0 {
		start := time.Now()
		var primed bool
		if out, primed, err = g.decode(); err != nil {
			return nil, false, err
		}
		prompted = prompted || primed
		g.stats.GenerationTime += time.Since(start)
		g.stats.GenerationTokens += len(out)
		if g.stats.GenerationSteps++; g.stats.GenerationSteps%512 == 0 {
			g.clearCache()
		}
	}
	if !g.opts.JoinPrefilled {
		p, err := g.promptStep()
		if err != nil {
			return nil, false, err
		}
		prompted = prompted || p
	}
	return out, prompted, nil
}

// promptStep is the prompt half of next: queued rows admitted while there
// is room, prefilled rows joining the generating ones (join), and one
// chunk of the other prompts prefilled. It reports whether it did any of
// that work but admitting.
func (g *BatchGenerator) promptStep() (bool, error) {
	if len(g.gen.rows) >= g.opts.CompletionBatchSize {
		return false, nil
	}
	start := time.Now()
	defer func() { g.stats.PromptTime += time.Since(start) }()
	n := min(g.opts.PrefillBatchSize-len(g.prompt.rows), g.opts.CompletionBatchSize-len(g.gen.rows), len(g.queue))
	if n > 0 {
		rows := g.queue[:n:n]
		g.queue = g.queue[n:]
		if err := g.admit(rows); err != nil {
			return false, err
		}
	}
	// (with JoinPrefilled, a one-token prompt has nothing to prefill)
	joined, err := g.join()
	if err != nil {
		return false, err
	}
	prefilled := len(g.prompt.rows) > 0
	if prefilled {
		step := g.opts.PrefillStepSize
		if g.opts.PrefillBudget > 0 && len(g.gen.rows) > 0 {
			step = min(step, max(1, g.opts.PrefillBudget/len(g.prompt.rows)))
		}
		chunks := make([][]int32, len(g.prompt.rows))
		for i, s := range g.prompt.rows {
			k := min(len(s.rest), step)
			chunks[i], s.rest = s.rest[:k], s.rest[k:]
		}
		if err := g.prefill(chunks); err != nil {
			return false, err
		}
	}
	if g.opts.JoinPrefilled {
		j, err := g.join()
		if err != nil {
			return false, err
		}
		joined = joined || j
	}
	return joined || prefilled, nil
}

// join moves the prefilling rows whose prompt is done (but its last token)
// to the generating ones, after a forward of their last prompt tokens that
// picks their first tokens (mlx_lm's order), or, with
// BatchOptions.JoinPrefilled, primed to run those tokens in the next
// decode step.
func (g *BatchGenerator) join() (bool, error) {
	var split []int
	for i, s := range g.prompt.rows {
		if len(s.rest) == 0 {
			split = append(split, i)
		}
	}
	if len(split) == 0 {
		return false, nil
	}
	var err error
	if g.ready, err = g.split(&g.prompt, split); err != nil {
		return false, err
	}
	for _, s := range g.ready.rows {
		s.next, s.primed = s.last, g.opts.JoinPrefilled
	}
	if !g.opts.JoinPrefilled {
		if err := g.forward(&g.ready); err != nil {
			return false, err
		}
	}
	ready := g.ready
	g.ready = batchPart{}
	return true, g.extend(&g.gen, ready)
}

// admit moves queued rows into prefill, in order: consecutive rows without
// a prefix share a new empty cache, a row with one brings its own.
func (g *BatchGenerator) admit(rows []*batchSeq) error {
	for len(rows) > 0 {
		var part batchPart
		if p := rows[0].prefix; p != nil {
			rows[0].prefix = nil
			part = batchPart{rows: rows[:1:1], cache: p}
			rows = rows[1:]
		} else {
			k := 1
			for k < len(rows) && rows[k].prefix == nil {
				k++
			}
			part = batchPart{rows: rows[:k:k], cache: g.m.NewBatchCache(make([]int, k))}
			rows = rows[k:]
		}
		if err := g.extend(&g.prompt, part); err != nil {
			return err
		}
	}
	return nil
}

// extend is _extend_cache plus the rows: p takes q's rows after its own.
func (g *BatchGenerator) extend(p *batchPart, q batchPart) error {
	if len(p.rows) == 0 {
		release(p.cache)
		*p = q
		return nil
	}
	switch {
	case p.next != nil && q.next != nil:
		old := []backend.Array{p.next, q.next}
		p.next = g.b.Concatenate(0, p.next, q.next)
		g.b.Release(old...)
	case p.next != nil || q.next != nil:
		if err := g.settle(p); err != nil {
			return err
		}
		if err := g.settle(&q); err != nil {
			return err
		}
	}
	for i, c := range p.cache {
		if err := c.Extend(q.cache[i]); err != nil {
			return err
		}
	}
	p.rows = append(p.rows, q.rows...)
	return nil
}

// split moves the rows idx (ascending) of p into a part of their own.
func (g *BatchGenerator) split(p *batchPart, idx []int) (batchPart, error) {
	if err := g.settle(p); err != nil {
		return batchPart{}, err
	}
	q := batchPart{cache: make([]*nn.BatchKVCache, len(p.cache))}
	for _, i := range idx {
		q.rows = append(q.rows, p.rows[i])
	}
	var keep []int
	for i := range p.rows {
		if !slices.Contains(idx, i) {
			keep = append(keep, i)
		}
	}
	for l, c := range p.cache {
		var err error
		if q.cache[l], err = c.Split(idx); err != nil {
			return batchPart{}, err
		}
	}
	// Split kept the other rows in p's caches (or released them).
	if len(keep) == 0 {
		*p = batchPart{}
		return q, nil
	}
	rows := make([]*batchSeq, len(keep))
	for i, k := range keep {
		rows[i] = p.rows[k]
	}
	p.rows = rows
	return q, nil
}

// filter keeps the rows keep of p (releasing its caches when none is kept).
func (g *BatchGenerator) filter(p *batchPart, keep []int) error {
	if len(keep) == 0 {
		release(p.cache)
		g.b.Release(p.next)
		*p = batchPart{}
		return nil
	}
	rows := make([]*batchSeq, len(keep))
	for i, k := range keep {
		rows[i] = p.rows[k]
	}
	for _, c := range p.cache {
		if err := c.Filter(keep); err != nil {
			return err
		}
	}
	if p.next != nil {
		idx := make([]int32, len(keep))
		for i, k := range keep {
			idx[i] = int32(k)
		}
		old := p.next
		p.next = g.b.Take(p.next, g.b.FromHost(tensor.FromInt32(tensor.Shape{len(idx)}, idx)), 0)
		g.b.Release(old)
	}
	p.rows = rows
	return nil
}

// settle reads p's tokens picked on the backend (batchPart.next) back into
// its rows.
func (g *BatchGenerator) settle(p *batchPart) error {
	if p.next == nil {
		return nil
	}
	h, err := g.b.ToHost(p.next)
	if err != nil {
		return err
	}
	for i, s := range p.rows {
		s.next, s.nextLP = h.Int32s()[i], nil
	}
	g.b.Release(p.next)
	p.next = nil
	return nil
}

// prefill is PromptProcessingBatch.prompt for chunks no longer than the
// step (chunks[r] of g.prompt.rows[r]): in one forward, or, under
// BatchOptions.PrefillPadLimit, in one per group of similar lengths
// through views of the rows' caches (prefillGroups).
func (g *BatchGenerator) prefill(chunks [][]int32) error {
	groups := g.prefillGroups(chunks)
	if groups == nil {
		return g.prefillRows(g.prompt.rows, chunks, g.prompt.cache)
	}
	for _, idx := range groups {
		rows := make([]*batchSeq, len(idx))
		sub := make([][]int32, len(idx))
		for i, r := range idx {
			rows[i], sub[i] = g.prompt.rows[r], chunks[r]
		}
		views := make([]*nn.BatchKVCache, len(g.prompt.cache))
		for l, c := range g.prompt.cache {
			v, err := c.RowView(idx)
			if err != nil {
				return fmt.Errorf("generate: batch prefill: %w", err)
			}
			views[l] = v
		}
		if err := g.prefillRows(rows, sub, views); err != nil {
			return err
		}
	}
	return nil
}

// prefillGroups returns the groups of rows (indexes of chunks) that
// PrefillPadLimit runs in forwards of their own, longest chunks first, or
// nil for one forward of every row: the option off, shared cache buffers,
// or every chunk within the limit of the longest.
func (g *BatchGenerator) prefillGroups(chunks [][]int32) [][]int {
	lim := g.opts.PrefillPadLimit
	if lim <= 0 || len(chunks) < 2 || len(g.prompt.cache) == 0 || !g.prompt.cache[0].RowCaches() {
		return nil
	}
	order := make([]int, len(chunks))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(chunks[b]) - len(chunks[a]) })
	var groups [][]int
	for _, r := range order {
		if n := len(groups); n > 0 && len(chunks[groups[n-1][0]])-len(chunks[r]) < lim {
			groups[n-1] = append(groups[n-1], r)
			continue
		}
		groups = append(groups, []int{r})
	}
	if len(groups) == 1 {
		return nil
	}
	return groups
}

// prefillRows runs chunks[r] of rows[r] through the model without the head
// into caches (g.prompt's, or views of some of its rows): right-padded to
// the longest, the caches evaluated, the padding turned into left padding.
func (g *BatchGenerator) prefillRows(rows []*batchSeq, chunks [][]int32, caches []*nn.BatchKVCache) error {
	L := 0
	for _, c := range chunks {
		L = max(L, len(c))
	}
	pad := make([]int, len(chunks))
	ids := make([]int32, len(chunks)*L)
	padded := false
	for r, c := range chunks {
		copy(ids[r*L:], c)
		pad[r] = L - len(c)
		padded = padded || pad[r] > 0
		s := rows[r]
		s.context = append(s.context, c...)
		g.stats.PromptTokens += len(c)
	}
	if padded {
		for _, c := range caches {
			if err := c.PrepareRightPadding(pad); err != nil {
				return err
			}
		}
	}
	if err := g.scoped(func() error {
		x := g.b.FromHost(tensor.FromInt32(tensor.Shape{len(chunks), L}, ids))
		return g.m.BatchAppend(x, caches)
	}); err != nil {
		return fmt.Errorf("generate: batch prefill: %w", err)
	}
	if err := g.evalCaches(); err != nil {
		return err
	}
	if padded {
		if err := g.scoped(func() error {
			for _, c := range caches {
				c.Finalize()
			}
			return nil
		}); err != nil {
			return err
		}
		return g.evalCaches()
	}
	return nil
}

// scoped runs fn in a scope of its own that keeps the caches' arrays.
func (g *BatchGenerator) scoped(fn func() error) error {
	sc := g.b.Scope()
	defer sc.Close()
	defer func() { sc.Keep(g.states()...) }()
	return fn()
}

func (g *BatchGenerator) evalCaches() error {
	if err := g.b.Eval(g.states()...); err != nil {
		return err
	}
	g.clearCache()
	return nil
}

func (g *BatchGenerator) clearCache() {
	if c, ok := g.b.(backend.CacheClearer); ok {
		c.ClearCache()
	}
}

// decode is GenerationBatch.next: one forward on the tokens sampled last
// step, then those tokens are handed out and finished rows leave. primed
// reports rows whose step ran their last prompt token
// (BatchOptions.JoinPrefilled), which hand nothing out yet.
func (g *BatchGenerator) decode() (out []BatchToken, primed bool, err error) {
	type prev struct {
		tok int32
		lp  []float32
	}
	if g.gen.next != nil && onHost(&g.gen) {
		if err := g.settle(&g.gen); err != nil {
			return nil, false, fmt.Errorf("generate: batch decode step: %w", err)
		}
	}
	cur := make([]prev, len(g.gen.rows))
	first := make([]bool, len(g.gen.rows)) // primed rows
	for i, s := range g.gen.rows {
		cur[i] = prev{s.next, s.nextLP}
		first[i], s.primed = s.primed, false
		primed = primed || first[i]
	}
	lazy := g.gen.next
	if err := g.forward(&g.gen); err != nil {
		return nil, false, err
	}
	if lazy != nil {
		// The step on lazy has started; now its tokens are read back.
		h, err := g.b.ToHost(lazy)
		if err != nil {
			return nil, false, fmt.Errorf("generate: batch decode step: %w", err)
		}
		for i, s := range g.gen.rows {
			cur[i].tok = h.Int32s()[i]
			s.context = append(s.context, cur[i].tok)
		}
		g.b.Release(lazy)
	}
	out = make([]BatchToken, 0, len(g.gen.rows))
	var keep []int
	for i, s := range g.gen.rows {
		if first[i] { // the step ran its last prompt token: nothing to hand out yet
			keep = append(keep, i)
			continue
		}
		t := BatchToken{UID: s.uid, Token: cur[i].tok, Logprobs: cur[i].lp}
		s.n++
		if s.n >= s.maxTokens {
			t.FinishReason = FinishLength
		}
		if slices.Contains(s.stop, t.Token) {
			t.FinishReason = FinishStop
		}
		if t.FinishReason == "" {
			keep = append(keep, i)
		} else if g.opts.ReturnCaches {
			for _, c := range g.gen.cache {
				e, err := c.Extract(i)
				if err != nil {
					return nil, false, err
				}
				t.Cache = append(t.Cache, e)
				g.handed = append(g.handed, e.State()...)
			}
		}
		out = append(out, t)
	}
	if len(keep) < len(g.gen.rows) {
		if err := g.filter(&g.gen, keep); err != nil {
			return nil, false, err
		}
	}
	return out, primed, nil
}

// wantsLP reports whether any row of p hands its log-probabilities out
// (BatchToken.Logprobs keeps the step's row).
func wantsLP(p *batchPart) bool {
	for _, s := range p.rows {
		if s.wantLP {
			return true
		}
	}
	return false
}

// onHost reports whether p's step samples on the host: unless every row is
// greedy, without processors, and wants no log-probabilities
// (BatchOptions.NoLogprobs).
func onHost(p *batchPart) bool {
	for _, s := range p.rows {
		if s.wantLP || !s.sampler.Greedy() || s.processors.Enabled() {
			return true
		}
	}
	return false
}

// forward is GenerationBatch._step on part p: the rows' next tokens go
// through the model, each row's processors and sampler give its new next
// token (row order, so rows sharing the random state draw in that order).
func (g *BatchGenerator) forward(p *batchPart) error {
	B := len(p.rows)
	host := onHost(p)
	if host {
		if err := g.settle(p); err != nil {
			return fmt.Errorf("generate: batch decode step: %w", err)
		}
	}
	// lazy: the input tokens are still on the backend (decode reads them
	// back, and adds them to the rows' context, after this step started).
	lazy := p.next
	var in []int32
	if lazy == nil {
		in = make([]int32, B)
		for i, s := range p.rows {
			in[i] = s.next
			s.context = append(s.context, s.next)
		}
	}
	var lp *tensor.Dense
	var dt tensor.DType // the logits' dtype (lp, or rows, holds them as float32)
	var rows []float32  // the rows read straight into g.rows (backend.HostReader), else nil
	var V int
	// at[i] is row i's place among the rows brought to the host; picked
	// holds the backend's picks when only some rows came (the others are
	// greedy rows without log-probabilities: at[i] is -1).
	at := make([]int, B)
	for i := range at {
		at[i] = i
	}
	var picked []int32
	err := g.scoped(func() error {
		var x backend.Array
		if lazy != nil {
			x = g.b.Reshape(lazy, B, 1)
		} else {
			x = g.b.FromHost(tensor.FromInt32(tensor.Shape{B, 1}, in))
		}
		logits, err := g.m.BatchLogits(x, p.cache)
		if err != nil {
			return err
		}
		s := logits.Shape()
		if len(s) == 3 && s[0] == B && s[1] == 1 {
			logits = g.b.Reshape(logits, B, s[2])
		} else if len(s) != 2 || s[0] != B {
			return fmt.Errorf("model logits are %v %v, want [%d, V] or [%d, 1, V]", logits.DType(), s, B, B)
		}
		if rounder(logits.DType()) == nil {
			return fmt.Errorf("model logits are %v %v, want BF16, F16 or F32", logits.DType(), s)
		}
		if logits, err = g.process(p, logits); err != nil {
			return err
		}
		out := g.b.Binary(backend.Subtract, logits, g.b.LogSumExp(logits, -1, true))
		if !host {
			p.next = g.b.AsType(g.b.Argmax(out, -1, false), tensor.I32)
			if a, ok := g.b.(backend.AsyncEvaler); ok {
				st := []backend.Array{p.next}
				for _, c := range p.cache {
					st = append(st, c.State()...)
				}
				return a.AsyncEval(st...)
			}
			return g.b.Eval(p.next)
		}
		if r, ok := g.b.(backend.HostReader); ok && !wantsLP(p) {
			// Nothing keeps a row past this step: read them into the
			// generator's own buffer, the same memory every step.
			dt, V = out.DType(), out.Shape()[1]
			if picked, out, err = g.sampledRows(p, out, at); err != nil || out == nil {
				rows = []float32{}
				return err
			}
			rows, err = readInto(r, &g.rows, out)
			return err
		}
		lp, dt, err = toHostF32(g.b, out)
		return err
	})
	if err != nil {
		return fmt.Errorf("generate: batch decode step: %w", err)
	}
	if !host {
		return nil
	}
	// The rows out of the host tensor, and the greedy rows' picks, in
	// parallel: on SmolLM2's 49152 logits each row is a copy and a scan,
	// serial work (2.8% of the CPU samples of BenchmarkBatchDecode at 8
	// rows, Zen 3, 2 cores, when the rows were float16 converted here)
	// while the backend's workers waited.
	if rows == nil {
		V = lp.Shape[1]
		rows = make([]float32, len(p.rows)*V)
	}
	picks := picked
	if picks == nil {
		picks = make([]int32, len(p.rows))
		parallelRows(len(p.rows), func(i int) {
			row := rows[i*V : (i+1)*V : (i+1)*V]
			if lp != nil {
				lp.Float32sAt(row, i*V)
			}
			if p.rows[i].sampler.Greedy() {
				picks[i] = int32(Argmax(row))
			}
		})
	}
	// Greedy rows first; the others take their keys in row order (rows
	// without a seed of their own share the generator's random state, as
	// in mlx_lm), then draw, in parallel when there are several.
	var drawn []int
	keys := make([][2]uint32, len(p.rows))
	for i, s := range p.rows {
		s.nextLP = nil
		if at[i] < 0 { // a greedy row picked on the backend
			s.next = picks[i]
			continue
		}
		row := rows[at[i]*V : (at[i]+1)*V : (at[i]+1)*V]
		if err := checkRow(row, dt); err != nil {
			return fmt.Errorf("generate: sampling sequence %d: %w", s.uid, err)
		}
		if s.wantLP {
			s.nextLP = row
		}
		if s.sampler.Greedy() {
			s.next = picks[i]
			continue
		}
		keys[i] = s.sampler.rng.Next()
		drawn = append(drawn, i)
	}
	errs := make([]error, len(p.rows))
	parallelRows(len(drawn), func(j int) {
		i := drawn[j]
		s := p.rows[i]
		defer func() { // a panic on another goroutine would end the process
			if r := recover(); r != nil {
				errs[i] = fmt.Errorf("generate: sampling sequence %d: %v", s.uid, r)
			}
		}()
		row := rows[at[i]*V : (at[i]+1)*V : (at[i]+1)*V]
		draw := s.sampler.draw
		if !s.wantLP { // nothing reads the row after this step: filter it in place
			draw = s.sampler.drawIn
		}
		tok, err := draw(row, dt, keys[i])
		if err != nil {
			errs[i] = fmt.Errorf("generate: sampling sequence %d: %w", s.uid, err)
		}
		s.next = tok
	})
	return errors.Join(errs...)
}

// sampledRows is the host step's read when some of p's rows are greedy
// (and want no log-probabilities) and others sample: the greedy rows take
// their picks on the backend, as a step whose rows are all greedy does
// (picked: every row's argmax, read back), and only the sampling rows'
// logits come to the host (sub: their rows of out in order, nil when there
// are none; at maps each row to its place there, -1 for a greedy row). On
// SmolLM2's 49152 logits a row read and scanned on the host took about 40
// µs of a server's eight-row decode step. When every row samples it
// returns picked nil and out itself, changing nothing.
func (g *BatchGenerator) sampledRows(p *batchPart, out backend.Array, at []int) (picked []int32, sub backend.Array, err error) {
	sampling := 0
	for _, s := range p.rows {
		if !s.sampler.Greedy() {
			sampling++
		}
	}
	if sampling == len(p.rows) {
		return nil, out, nil
	}
	idx := make([]int32, 0, sampling)
	for i, s := range p.rows {
		at[i] = -1
		if !s.sampler.Greedy() {
			at[i] = len(idx)
			idx = append(idx, int32(i))
		}
	}
	h, err := g.b.ToHost(g.b.AsType(g.b.Argmax(out, -1, false), tensor.I32))
	if err != nil {
		return nil, nil, err
	}
	if len(idx) == 0 { // greedy rows with logits processors
		return h.Int32s(), nil, nil
	}
	return h.Int32s(), g.b.Take(out, g.b.FromHost(tensor.FromInt32(tensor.Shape{len(idx)}, idx)), 0), nil
}

// parallelRows runs f(0) to f(n-1) on up to GOMAXPROCS goroutines when n
// is two or more (a draw over a large vocabulary is a few exp-heavy passes
// over its row, and the backend's workers are idle meanwhile), else on
// this one.
func parallelRows(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers < 2 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// process applies the rows' logits processors on the host (rows without
// any are left alone) and returns the logits on the backend.
func (g *BatchGenerator) process(p *batchPart, logits backend.Array) (backend.Array, error) {
	any := false
	for _, s := range p.rows {
		any = any || s.processors.Enabled()
	}
	if !any {
		return logits, nil
	}
	h, dt, err := toHostF32(g.b, logits)
	if err != nil {
		return nil, err
	}
	all := h.ToFloat32()
	V := h.Shape[1]
	for i, s := range p.rows {
		if s.processors.Enabled() {
			if err := s.processors.Process(s.context, all[i*V:(i+1)*V], dt); err != nil {
				return nil, err
			}
		}
	}
	return g.b.FromHost(tensor.FromFloat32(h.Shape, all).Convert(dt)), nil
}

// BatchResult is one sequence's outcome of BatchGenerate.
type BatchResult struct {
	// Tokens are the generated tokens, a final stop token excluded (as
	// batch_generate's token_ids).
	Tokens []int32
	// Logprobs holds, for each of Tokens, its log-probability.
	Logprobs []float32
	// FinishReason is FinishStop or FinishLength.
	FinishReason string
}

// BatchGenerate runs every prompt to completion with a BatchGenerator, as
// mlx_lm's batch_generate: seqs is nil or one SequenceOptions per prompt;
// onToken (when not nil) sees every token as it is handed out, with the
// index of its prompt. It returns one result per prompt, in prompt order,
// and the generator's statistics.
func BatchGenerate(m BatchModel, prompts [][]int32, opts BatchOptions, seqs []SequenceOptions, onToken func(prompt int, t BatchToken)) ([]BatchResult, BatchStats, error) {
	g, err := NewBatchGenerator(m, opts)
	if err != nil {
		return nil, BatchStats{}, err
	}
	defer g.Close()
	uids, err := g.Insert(prompts, seqs)
	if err != nil {
		return nil, BatchStats{}, err
	}
	index := make(map[int]int, len(uids))
	for i, u := range uids {
		index[u] = i
	}
	res := make([]BatchResult, len(prompts))
	for {
		toks, err := g.NextGenerated()
		if err != nil {
			return nil, g.Stats(), err
		}
		if len(toks) == 0 {
			break
		}
		for _, t := range toks {
			i := index[t.UID]
			if onToken != nil {
				onToken(i, t)
			}
			if t.FinishReason != FinishStop {
				res[i].Tokens = append(res[i].Tokens, t.Token)
				if t.Logprobs != nil { // nil under BatchOptions.NoLogprobs
					res[i].Logprobs = append(res[i].Logprobs, t.Logprobs[t.Token])
				}
			}
			res[i].FinishReason = t.FinishReason
		}
	}
	return res, g.Stats(), nil
}
