package kernel

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// Rounder rounds a float32 result to the storage dtype (identity for F32;
// tensor.RoundBF16 or tensor.RoundF16 otherwise). Kernels treat nil as Identity.
type Rounder func(float32) float32

// Acc is the accumulation precision of a kernel.
type Acc int

const (
	// AccF32 accumulates in float32, as MLX's kernels do (the default).
	AccF32 Acc = iota
	// AccF64 accumulates in float64 (high-precision debugging mode); results
	// are still rounded by the Rounder.
	AccF64
)

// Identity is the Rounder of float32 storage.
func Identity(f float32) float32 { return f }

var threads atomic.Int64

// SetThreads sets the number of worker goroutines the fast kernels use;
// n <= 0 means runtime.GOMAXPROCS(0) (the default).
func SetThreads(n int) { threads.Store(int64(n)) }

// Threads returns the number of worker goroutines the fast kernels use.
func Threads() int {
	if n := int(threads.Load()); n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// parallelFor calls fn on disjoint ranges [lo, hi) covering [0, n), on up to
// Threads() goroutines, each range holding at least minChunk items (except
// when n itself is smaller). It runs fn inline when one worker suffices.
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
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*n/workers, (w+1)*n/workers
		if lo == hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// need panics unless the slice called name has at least n elements.
func need(kernel, name string, have, n int) {
	if have < n {
		panic(fmt.Sprintf("kernel.%s: %s has %d elements, want at least %d", kernel, name, have, n))
	}
}

// check panics with a message naming the kernel when ok is false.
func check(ok bool, kernel, format string, args ...any) {
	if !ok {
		panic(fmt.Sprintf("kernel.%s: %s", kernel, fmt.Sprintf(format, args...)))
	}
}

// roundOr returns r, or Identity when r is nil.
func roundOr(r Rounder) Rounder {
	if r == nil {
		return Identity
	}
	return r
}
