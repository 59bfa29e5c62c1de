package kernel

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelForCoversOnce: every index of [0, n) is handed to fn exactly
// once, in ranges of at least minChunk items (except the whole of a smaller
// n), whatever the thread count.
func TestParallelForCoversOnce(t *testing.T) {
	for _, tc := range []struct{ n, minChunk, threads int }{
		{1, 1, 2}, {2, 1, 2}, {7, 3, 2}, {100, 1, 2}, {100, 30, 2}, {1000, 7, 3}, {130560, 10, 2}, {5, 100, 4},
	} {
		t.Run(fmt.Sprintf("n%d_min%d_t%d", tc.n, tc.minChunk, tc.threads), func(t *testing.T) {
			setThreads(t, tc.threads)
			for rep := range 20 {
				hits := make([]atomic.Int32, tc.n)
				var mu sync.Mutex
				var short []int
				parallelFor(tc.n, tc.minChunk, func(lo, hi int) {
					if hi-lo < tc.minChunk && hi-lo < tc.n {
						mu.Lock()
						short = append(short, hi-lo)
						mu.Unlock()
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if got := hits[i].Load(); got != 1 {
						t.Fatalf("rep %d: index %d computed %d times, want 1", rep, i, got)
					}
				}
				if len(short) > 0 {
					t.Fatalf("rep %d: ranges of %v items, want >= %d", rep, short, tc.minChunk)
				}
			}
		})
	}
}

// TestParallelForUsesWorkers: a job of slow chunks runs on more than one
// goroutine at a time, both while the worker spins and after it parked.
func TestParallelForUsesWorkers(t *testing.T) {
	setThreads(t, 2)
	for _, pause := range []time.Duration{0, 3 * spinFor} {
		t.Run(fmt.Sprint("pause_", pause), func(t *testing.T) {
			time.Sleep(pause)
			var active, most atomic.Int32
			parallelFor(64, 1, func(lo, hi int) {
				a := active.Add(1)
				for {
					m := most.Load()
					if a <= m || most.CompareAndSwap(m, a) {
						break
					}
				}
				time.Sleep(2 * time.Millisecond)
				active.Add(-1)
			})
			if got := most.Load(); got != 2 {
				t.Fatalf("at most %d chunks ran at once, want 2 (the caller and one worker)", got)
			}
		})
	}
}

// TestParallelForNestedRunsInline: a parallelFor inside another runs inline
// and still covers its range.
func TestParallelForNestedRunsInline(t *testing.T) {
	setThreads(t, 2)
	before := inlineRuns.Load()
	var total atomic.Int64
	parallelFor(4, 1, func(lo, hi int) {
		for range hi - lo {
			parallelFor(10, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
		}
	})
	if got := total.Load(); got != 40 {
		t.Fatalf("nested work: got %d items, want 40", got)
	}
	if inlineRuns.Load() == before {
		t.Fatalf("no nested call ran inline")
	}
}

// setThreads sets the worker count for the rest of the test.
func setThreads(t *testing.T, n int) {
	old := int(threads.Load())
	SetThreads(n)
	t.Cleanup(func() { SetThreads(old) })
}

// TestChunkStart: the chunks cover [0, n) in order; with w participants the
// first w chunks share n - n/8 items within one of each other, and every
// chunk parallelFor makes holds at least minChunk items.
func TestChunkStart(t *testing.T) {
	for _, tc := range []struct{ n, minChunk, threads int }{
		{16, 1, 2}, {100, 1, 2}, {100, 7, 2}, {576, 7, 2}, {1536, 2, 2}, {130560, 10, 3}, {24, 7, 2}, {72, 7, 2},
	} {
		t.Run(fmt.Sprintf("n%d_min%d_t%d", tc.n, tc.minChunk, tc.threads), func(t *testing.T) {
			chunks, w, split := chunkPlan(tc.n, tc.minChunk, tc.threads)
			if !split {
				w = 0
			}
			prev := chunkStart(0, chunks, tc.n, w)
			if prev != 0 || chunkStart(chunks, chunks, tc.n, w) != tc.n {
				t.Fatalf("chunks start at %d and end at %d, want 0 and %d", prev, chunkStart(chunks, chunks, tc.n, w), tc.n)
			}
			for i := 1; i <= chunks; i++ {
				c := chunkStart(i, chunks, tc.n, w)
				if c-prev < tc.minChunk {
					t.Errorf("chunk %d of %d holds %d items, want >= %d (w %d)", i-1, chunks, c-prev, tc.minChunk, w)
				}
				prev = c
			}
			if w > 0 {
				head := tc.n - tc.n/8
				if got := chunkStart(w, chunks, tc.n, w); got != head {
					t.Errorf("the %d large chunks end at %d, want %d", w, got, head)
				}
			}
		})
	}
}
