package kernel

import (
	"sync"
	"sync/atomic"
)

// The worker pool behind parallelFor. Starting a goroutine per op costs a
// few microseconds and a decode step runs a few hundred ops, so the workers
// are started once and parked on a channel between ops. The calling
// goroutine always runs the first range itself. Only one parallelFor uses
// the pool at a time: a concurrent or nested call finds it busy and runs
// inline (single goroutine), which keeps nesting deadlock-free.

// task is one range of a parallelFor.
type task struct {
	fn     func(lo, hi int)
	lo, hi int
	wg     *sync.WaitGroup
}

type workerPool struct {
	busy    sync.Mutex // held by the parallelFor using the workers
	mu      sync.Mutex // guards started
	started int
	tasks   chan task
}

var pool = workerPool{tasks: make(chan task)}

// ensure starts workers until n are running.
func (p *workerPool) ensure(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.started < n {
		p.started++
		go func() {
			for t := range p.tasks {
				t.fn(t.lo, t.hi)
				t.wg.Done()
			}
		}()
	}
}

var wgPool = sync.Pool{New: func() any { return new(sync.WaitGroup) }}

// inlineRuns counts parallelFor calls that found the pool busy (tests).
var inlineRuns atomic.Int64

// parallelFor calls fn on disjoint ranges [lo, hi) covering [0, n), on up to
// Threads() goroutines, each range holding at least minChunk items (except
// when n itself is smaller). It runs fn inline when one worker suffices or
// when the pool is already in use (a nested or concurrent call).
func parallelFor(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if minChunk < 1 {
		minChunk = 1
	}
	workers := min(Threads(), (n+minChunk-1)/minChunk)
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
	wg := wgPool.Get().(*sync.WaitGroup)
	for w := 1; w < workers; w++ {
		lo, hi := w*n/workers, (w+1)*n/workers
		if lo == hi {
			continue
		}
		wg.Add(1)
		pool.tasks <- task{fn: fn, lo: lo, hi: hi, wg: wg}
	}
	if hi := n / workers; hi > 0 {
		fn(0, hi)
	}
	wg.Wait()
	wgPool.Put(wg)
}
