package kernel

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
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
	// AccQ8 is the approximate "fast" mode of the quantized matmul with
	// transposed weights: the activations are quantized to int8 per block of
	// 32 and multiplied with the integer codes in integer arithmetic (see
	// qmmTQ8Ref). SDPAKV over 8-bit quantized keys quantizes its query
	// rows likewise and scores them in integer arithmetic (sdpa_q8.go).
	// Every other kernel treats it as AccF32.
	AccQ8
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
	return maxProcs()
}

// procs is runtime.GOMAXPROCS(0) as last read, and when (unix nanoseconds).
var procs struct {
	n, at atomic.Int64
}

// maxProcs returns runtime.GOMAXPROCS(0), read again at most every
// procsEvery: every parallelFor asks, a few hundred times a decode step,
// and GOMAXPROCS takes the scheduler's lock, which the pool's spinning
// workers take too (runtime.Gosched): 10% of the main goroutine's own time
// in an eight-row SmolLM2 decode step went there (BenchmarkBatchDecode,
// Zen 4, two threads). The runtime may change GOMAXPROCS by itself (a
// container's CPU limit), so the value is not kept for good.
func maxProcs() int {
	now := time.Now().UnixNano()
	if n := procs.n.Load(); n > 0 && now-procs.at.Load() < int64(procsEvery) {
		return int(n)
	}
	n := runtime.GOMAXPROCS(0)
	procs.n.Store(int64(n))
	procs.at.Store(now)
	return n
}

// procsEvery is how long maxProcs keeps a reading of GOMAXPROCS.
const procsEvery = 100 * time.Millisecond

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
