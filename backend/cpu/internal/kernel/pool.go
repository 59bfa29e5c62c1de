package kernel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The worker pool behind parallelFor. A decode step runs a few hundred
// parallel ops of tens of microseconds each, so how fast the workers join
// matters as much as the split:
//
//   - Workers are started once. After a job they spin (yielding) for
//     spinFor, watching for the next one, so back-to-back ops do not pay a
//     futex wake-up; then they park on a channel until woken.
//   - A job's range is cut into chunks that the caller and the workers
//     claim with an atomic counter: first one large chunk per participant,
//     together 7/8 of the items, then small ones for the rest (see
//     chunkStart). When every participant starts at once, each runs its
//     large chunk and the small ones even out the finish; a worker that
//     joins late (or a core busy with something else) finds the small ones
//     left, and costs at most one of them. Every item is computed by fn
//     exactly once whichever goroutine claims it, so results do not depend
//     on the split.
//
// The calling goroutine always works on the job itself. Only one
// parallelFor uses the pool at a time: a concurrent or nested call finds it
// busy and runs inline (single goroutine), which keeps nesting
// deadlock-free.

// The job being run lives in the pool itself (parallelFor allocates
// nothing): fn and n, written before the job is published, and word, which
// packs the job's generation (bits 32-63), its chunk count (16-31) and the
// next unclaimed chunk (0-15). A chunk is claimed by a compare-and-swap on
// word, so a worker that wakes after its job ended (word has moved to
// another generation) claims nothing and reads nothing else.

// spinFor is how long an idle worker keeps looking for the next job before
// it parks.
const spinFor = 100 * time.Microsecond

type workerPool struct {
	busy    sync.Mutex // held by the parallelFor using the workers
	mu      sync.Mutex // guards started
	started int

	fn          func(lo, hi int) // the current job (valid while a chunk of it is claimed)
	n           int
	workers     int           // the job's participants with the large-chunks split (chunkStart); 0: uniform
	gen         uint32        // the last published generation (written under busy)
	word        atomic.Uint64 // generation<<32 | chunks<<16 | next chunk
	done        atomic.Int64  // chunks of the current job finished
	seats       atomic.Int32  // workers that may still join the current job
	callerWaits atomic.Bool   // the caller sleeps on finished
	finished    chan struct{} // the last chunk's signal to a sleeping caller
	parked      atomic.Int32  // workers parked on wake
	wake        chan struct{}
}

var pool = workerPool{wake: make(chan struct{}, 64), finished: make(chan struct{}, 1)}

// work claims and runs chunks of generation gen until none are left.
func (p *workerPool) work(gen uint32) {
	for {
		w := p.word.Load()
		next, chunks := int(w&0xffff), int(w>>16&0xffff)
		if uint32(w>>32) != gen || next >= chunks {
			return
		}
		if !p.word.CompareAndSwap(w, w+1) {
			continue
		}
		if lo, hi := chunkStart(next, chunks, p.n, p.workers), chunkStart(next+1, chunks, p.n, p.workers); lo < hi {
			p.fn(lo, hi)
		}
		if int(p.done.Add(1)) == chunks && p.callerWaits.Load() {
			select {
			case p.finished <- struct{}{}:
			default:
			}
		}
	}
}

// ensure starts workers until n are running.
func (p *workerPool) ensure(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.started < n {
		p.started++
		go p.worker()
	}
}

// worker runs jobs as they are published: spinning briefly after each, then
// parked until parallelFor wakes it.
func (p *workerPool) worker() {
	seen := uint32(p.word.Load() >> 32)
	for {
		deadline := time.Now().Add(spinFor)
		for spins := 0; ; spins++ {
			if g := uint32(p.word.Load() >> 32); g != seen {
				seen = g
				if p.seats.Add(-1) >= 0 {
					p.work(g)
				}
				deadline = time.Now().Add(spinFor)
				continue
			}
			if spins%64 == 63 {
				if time.Now().After(deadline) {
					break
				}
				runtime.Gosched()
			}
		}
		p.parked.Add(1)
		if uint32(p.word.Load()>>32) == seen { // re-check after announcing: a job published in between is seen here or woken below
			<-p.wake
		}
		p.parked.Add(-1)
	}
}

// chunkPlan returns how parallelFor cuts n items for threads goroutines:
// the chunk count, the participants, and whether it uses chunkStart's
// large-chunks split (when its small chunks hold minChunk items each).
func chunkPlan(n, minChunk, threads int) (chunks, workers int, split bool) {
	chunks = min(n/minChunk, threads*chunksPerWorker, 0xffff)
	workers = min(threads, chunks)
	if tail := min(chunks-workers, n/8/minChunk); workers > 1 && tail > 0 {
		chunks, split = workers+tail, true
	}
	return chunks, workers, split
}

// chunkStart is the first item of chunk i (i = chunks: n) when n items are
// cut into chunks. With w = 0 the chunks are equal. Otherwise the first w
// chunks, one per participant, share 7/8 of the items equally and the
// other chunks the rest (parallelFor uses this split when those hold
// minChunk items each). Against four equal chunks per participant, in
// interleaved runs (mlxgo generate, fast, 2 threads, Zen 3, quiet
// machine): SmolLM2's decode 80–112 tok/s (median 88) where the equal
// split read 69–92 (median 82), Llama-3.2-1B's 16.6–19.5 against
// 16.7–17.9: fewer claims, and each participant's share in one piece.
func chunkStart(i, chunks, n, w int) int {
	if w == 0 || chunks <= w {
		return i * n / chunks
	}
	head := n - n/8
	if i <= w {
		return i * head / w
	}
	return head + (i-w)*(n-head)/(chunks-w)
}

// inlineRuns counts parallelFor calls that found the pool busy (tests).
var inlineRuns atomic.Int64

// chunksPerWorker is how many chunks each participant gets on average.
const chunksPerWorker = 4

// parallelJobs runs several jobs' items in one parallelFor (one pass of
// the workers): job i has counts[i] items, and run(i, lo, hi) computes
// items lo..hi-1 of job i; the chunks hold at least minChunk items of the
// jobs together.
func parallelJobs(counts []int, minChunk int, run func(i, lo, hi int)) {
	start := make([]int, len(counts)+1) // the first item of each job in the pass
	for i, c := range counts {
		start[i+1] = start[i] + c
	}
	parallelFor(start[len(counts)], minChunk, func(lo, hi int) {
		for i := range counts {
			if a, b := max(lo, start[i]), min(hi, start[i+1]); a < b {
				run(i, a-start[i], b-start[i])
			}
		}
	})
}

// ParallelFor is parallelFor for the backend's own loops (a reduction or
// an elementwise op over the rows of a batch): fn on disjoint ranges
// [lo, hi) covering [0, n), each of at least minChunk items, on the fast
// kernels' workers; inline when one suffices or the pool is in use. fn
// must compute each item the same way whichever range holds it.
func ParallelFor(n, minChunk int, fn func(lo, hi int)) { parallelFor(n, minChunk, fn) }

// parallelFor calls fn on disjoint ranges [lo, hi) covering [0, n), on up to
// Threads() goroutines, in up to chunksPerWorker ranges per goroutine of at
// least minChunk items each (one range [0, n) when n < 2·minChunk). It runs fn inline when one worker suffices or
// when the pool is already in use (a nested or concurrent call).
func parallelFor(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if minChunk < 1 {
		minChunk = 1
	}
	if n < 2*minChunk { // one chunk, whatever the threads: not worth asking how many
		fn(0, n)
		return
	}
	chunks, workers, split := chunkPlan(n, minChunk, Threads())
	if workers <= 1 {
		fn(0, n)
		return
	}
	if !pool.busy.TryLock() {
		inlineRuns.Add(1)
		fn(0, n)
		return
	}
	defer pool.busy.Unlock()
	pool.ensure(workers - 1)
	p := &pool
	p.fn, p.n, p.workers = fn, n, workers
	if !split {
		p.workers = 0
	}
	p.done.Store(0)
	p.seats.Store(int32(workers - 1))
	p.callerWaits.Store(false)
	select { // a signal left over from an earlier job
	case <-p.finished:
	default:
	}
	p.gen++
	p.word.Store(uint64(p.gen)<<32 | uint64(chunks)<<16)
	for range min(int(p.parked.Load()), workers-1) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	p.work(p.gen)
	// Every chunk is claimed; wait for the ones the workers still run.
	for spins := 0; int(p.done.Load()) < chunks; spins++ {
		if spins < 1000 {
			runtime.Gosched()
			continue
		}
		p.callerWaits.Store(true)
		if int(p.done.Load()) < chunks {
			<-p.finished
		}
	}
	p.fn = nil
}
