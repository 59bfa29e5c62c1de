package server

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
)

// job is one request's sequence as the engine sees it.
type job struct {
	prompt      []int32
	seq         generate.SequenceOptions
	topLogprobs int  // how many alternatives per token (0: none)
	logprobs    bool // report each token's logprob
	out         *outbox
	uid         int     // the generator's uid, once inserted
	generated   []int32 // the tokens handed out, kept for the prefix cache
}

// tokenEvent is one generated token handed to a request.
type tokenEvent struct {
	id      int32
	logprob float32
	top     []topEntry // the most likely tokens, with topLogprobs
	finish  string     // "" while the sequence goes on, else stop or length
}

type topEntry struct {
	id      int32
	logprob float32
}

// outbox carries tokens from the engine to a request's handler without
// ever blocking the engine: the engine appends and signals, the handler
// takes everything there is.
type outbox struct {
	mu     sync.Mutex
	toks   []tokenEvent
	err    error // the engine failed the sequence
	done   bool  // no more events
	cached int   // prompt tokens reused from the prefix cache
	notify chan struct{}
}

func newOutbox() *outbox { return &outbox{notify: make(chan struct{}, 1)} }

func (o *outbox) signal() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *outbox) push(ev tokenEvent) {
	o.mu.Lock()
	o.toks = append(o.toks, ev)
	if ev.finish != "" {
		o.done = true
	}
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) fail(err error) {
	o.mu.Lock()
	o.err, o.done = err, true
	o.mu.Unlock()
	o.signal()
}

// take returns the events so far and whether the sequence ended (with its
// error, if it failed).
func (o *outbox) take() (evs []tokenEvent, done bool, cached int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	evs, o.toks = o.toks, nil
	return evs, o.done, o.cached, o.err
}

// MemoryStats are the backend's live arrays and bytes and the prompt
// cache's share of them, as GET /health reports them.
type MemoryStats struct {
	LiveArrays        int   `json:"live_arrays"`
	LiveBytes         int64 `json:"live_bytes"`
	PromptCacheArrays int   `json:"prompt_cache_arrays"`
	PromptCacheBytes  int64 `json:"prompt_cache_bytes"`
	PromptCacheSeqs   int   `json:"prompt_cache_sequences"`
	Sequences         int   `json:"sequences"` // held by the batch generator
	// PackedBytes are the weights kept rearranged for the int8 kernels
	// (cpu --precision fast on AVX-512 VNNI, unless --no-pack-weights;
	// backend.Stats.PackedBytes): built by the first
	// requests, then constant; not part of LiveBytes. ReleasedBytes are
	// the pages of the checkpoint's mapping that the packed copies
	// replaced, given back to the operating system.
	PackedBytes   int64 `json:"packed_bytes,omitempty"`
	ReleasedBytes int64 `json:"released_bytes,omitempty"`
	// LeakedByGC counts the arrays the backend's garbage-collector safety
	// net freed since it opened: arrays dropped without a release, each a
	// leak even though its memory came back (backend.Stats.LeakedByGC).
	LeakedByGC int `json:"leaked_by_gc"`
}

// EngineStats count the engine's work since the server started (its
// generators' generate.BatchStats, summed over the fresh generators that
// follow a failed step): decode steps and the tokens they handed out,
// prompt tokens prefilled, and the time in each. A request's first decode
// step runs its last prompt token and hands nothing out (its first token
// comes from that step, handed out by the next: generate.BatchOptions.
// JoinPrefilled), so GeneratedTokens / Steps is a little below the rows of
// an average step; DecodeSeconds / Steps is its time.
type EngineStats struct {
	Steps           int     `json:"decode_steps"`
	GeneratedTokens int     `json:"generated_tokens"`
	DecodeSeconds   float64 `json:"decode_seconds"`
	PromptTokens    int     `json:"prompt_tokens"`
	PrefillSeconds  float64 `json:"prefill_seconds"`
}

// health is what the engine reports between steps (Server.Stats).
type health struct {
	mem MemoryStats
	eng EngineStats
}

// engine owns the model's batch generator and the prefix cache: one
// goroutine (run) does all backend work, between decode steps it takes new
// jobs and cancellations from channels.
type engine struct {
	m      generate.BatchModel
	opts   generate.BatchOptions
	g      *generate.BatchGenerator
	cache  *prefixCache
	submit chan *job
	cancel chan *job
	stats  chan chan health
	quit   chan struct{}
	done   chan struct{}
	jobs   map[int]*job
	past   generate.BatchStats // the work of the generators reset replaced
}

// newEngine starts the engine; dir, when not nil, is where the prefix
// cache is saved, and its files are loaded first.
func newEngine(m generate.BatchModel, opts generate.BatchOptions, cacheBytes int64, dir *cacheDir) (*engine, error) {
	opts.ReturnCaches = cacheBytes > 0
	cache := newPrefixCache(m.Backend(), cacheBytes)
	if dir != nil {
		if err := dir.load(cache); err != nil {
			return nil, err
		}
		cache.dir = dir
	}
	g, err := generate.NewBatchGenerator(m, opts)
	if err != nil {
		cache.dir = nil
		cache.clear()
		return nil, err
	}
	e := &engine{m: m, opts: opts, g: g, cache: cache,
		submit: make(chan *job), cancel: make(chan *job, 64), stats: make(chan chan health),
		quit: make(chan struct{}), done: make(chan struct{}), jobs: map[int]*job{}}
	go e.run()
	return e, nil
}

// close stops the engine, failing the sequences it holds, and frees
// everything it holds.
func (e *engine) close() {
	select {
	case <-e.quit:
	default:
		close(e.quit)
	}
	<-e.done
}

var errClosed = errors.New("the server is shutting down")

func (e *engine) run() {
	defer close(e.done)
	defer func() {
		for _, j := range e.jobs {
			j.out.fail(errClosed)
		}
		e.g.Close()
		e.cache.clear()
	}()
	for {
		if e.g.Done() {
			select {
			case j := <-e.submit:
				e.insert(j)
			case j := <-e.cancel:
				e.remove(j)
			case c := <-e.stats:
				c <- health{e.memory(), e.work()}
			case <-e.quit:
				return
			}
		}
	drain:
		for {
			select {
			case j := <-e.submit:
				e.insert(j)
			case j := <-e.cancel:
				e.remove(j)
			case c := <-e.stats:
				c <- health{e.memory(), e.work()}
			case <-e.quit:
				return
			default:
				break drain
			}
		}
		if !e.g.Done() {
			e.step()
		}
	}
}

// memory reports the backend's memory (on the engine's goroutine, between steps).
func (e *engine) memory() MemoryStats {
	st := e.m.Backend().Stats()
	return MemoryStats{LiveArrays: st.LiveArrays, LiveBytes: st.LiveBytes,
		PromptCacheArrays: e.cache.arrays(), PromptCacheBytes: e.cache.bytes, PromptCacheSeqs: len(e.cache.entries),
		Sequences: e.g.Len(), PackedBytes: st.PackedBytes, ReleasedBytes: st.ReleasedBytes, LeakedByGC: st.LeakedByGC}
}

// work sums the generators' statistics (on the engine's goroutine).
func (e *engine) work() EngineStats {
	s := addWork(e.past, e.g.Stats())
	return EngineStats{Steps: s.GenerationSteps, GeneratedTokens: s.GenerationTokens, DecodeSeconds: s.GenerationTime.Seconds(),
		PromptTokens: s.PromptTokens, PrefillSeconds: s.PromptTime.Seconds()}
}

// addWork is a's counts and times plus b's (PeakBytes left out).
func addWork(a, b generate.BatchStats) generate.BatchStats {
	return generate.BatchStats{PromptTokens: a.PromptTokens + b.PromptTokens, PromptTime: a.PromptTime + b.PromptTime,
		GenerationTokens: a.GenerationTokens + b.GenerationTokens, GenerationTime: a.GenerationTime + b.GenerationTime,
		GenerationSteps: a.GenerationSteps + b.GenerationSteps}
}

// insert queues j, starting it from the longest cached prefix of its prompt.
func (e *engine) insert(j *job) {
	defer e.recover(j)
	seq := j.seq
	ent, n := e.cache.lookup(j.prompt)
	if ent != nil {
		seq.Prefix, seq.PrefixTokens = ent.cache, n
	}
	uids, err := e.g.Insert([][]int32{j.prompt}, []generate.SequenceOptions{seq})
	if err != nil && ent != nil {
		// The generator failed on the cached prefix: try without it.
		ent, n = nil, 0
		uids, err = e.g.Insert([][]int32{j.prompt}, []generate.SequenceOptions{j.seq})
	}
	if err != nil {
		j.out.fail(badRequest("", "%v", err))
		return
	}
	j.uid = uids[0]
	e.jobs[j.uid] = j
	j.out.mu.Lock()
	j.out.cached = n
	j.out.mu.Unlock()
}

// remove cancels j: its sequence leaves the generator and its cache rows
// are freed now.
func (e *engine) remove(j *job) {
	defer e.recover(nil)
	if e.jobs[j.uid] != j {
		return // finished, failed or never inserted
	}
	delete(e.jobs, j.uid)
	if err := e.g.Remove(j.uid); err != nil {
		e.reset(fmt.Errorf("removing a cancelled sequence: %w", err))
	}
}

// step runs one generator step and hands out its tokens. A failure fails
// every sequence and starts a fresh generator (the caches of a failed step
// are not valid).
func (e *engine) step() {
	defer e.recover(nil)
	toks, err := e.g.Next()
	if err != nil {
		e.reset(err)
		return
	}
	for _, t := range toks {
		j := e.jobs[t.UID]
		if j == nil {
			e.releaseCache(t.Cache)
			continue
		}
		ev := tokenEvent{id: t.Token, finish: t.FinishReason}
		if j.logprobs && int(t.Token) < len(t.Logprobs) {
			ev.logprob = t.Logprobs[t.Token]
			ev.top = topK(t.Logprobs, j.topLogprobs)
		}
		if e.opts.ReturnCaches {
			j.generated = append(j.generated, t.Token)
		}
		if t.FinishReason != "" {
			delete(e.jobs, t.UID)
			if t.Cache != nil {
				e.keep(j, t.Cache)
			}
		}
		j.out.push(ev)
	}
}

// keep stores a finished sequence's cache in the prefix cache, keyed by
// the tokens it holds: the prompt and every token handed out.
func (e *engine) keep(j *job, c []nn.KVCache) {
	held := append(slices.Clone(j.prompt), j.generated...)
	if len(held) != c[0].Offset() {
		e.releaseCache(c)
		return
	}
	e.cache.add(held, c)
}

func (e *engine) releaseCache(c []nn.KVCache) {
	if c == nil {
		return
	}
	b := e.m.Backend()
	_ = b.Do(func() (err error) {
		defer backend.Recover(&err)
		for _, l := range c {
			l.Release()
		}
		return nil
	})
}

// recover turns a panic of the generator into a reset, failing j (the job
// being inserted, or nil) too, so that no request can end the process.
func (e *engine) recover(j *job) {
	if r := recover(); r != nil {
		err := fmt.Errorf("panic in the generator: %v", r)
		if j != nil {
			j.out.fail(&apiError{Status: 500, Type: "server_error", Message: err.Error()})
		}
		e.reset(err)
	}
}

// reset fails every held sequence with err and replaces the generator.
func (e *engine) reset(err error) {
	for uid, j := range e.jobs {
		j.out.fail(&apiError{Status: 500, Type: "server_error", Message: "generation failed: " + err.Error()})
		delete(e.jobs, uid)
	}
	e.past = addWork(e.past, e.g.Stats())
	e.g.Close()
	g, gerr := generate.NewBatchGenerator(e.m, e.opts)
	if gerr != nil {
		panic(gerr) // the options were accepted once; they do not change
	}
	e.g = g
}

// topK returns the k largest entries of lp, largest first (smaller id on
// ties).
func topK(lp []float32, k int) []topEntry {
	if k <= 0 {
		return nil
	}
	k = min(k, len(lp))
	out := make([]topEntry, 0, k+1)
	for id, v := range lp {
		if len(out) == k && !(v > out[k-1].logprob) {
			continue
		}
		e := topEntry{int32(id), v}
		i := sort.Search(len(out), func(i int) bool { return out[i].logprob < v })
		out = slices.Insert(out, i, e)
		if len(out) > k {
			out = out[:k]
		}
	}
	return out
}
