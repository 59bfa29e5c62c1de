package cpu

import (
	"fmt"
	"runtime"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/backend/internal/lifetime"
	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	backend.Register("cpu", func(o backend.Options) (backend.Backend, error) { return New(o) })
}

var (
	_ backend.Backend            = (*Backend)(nil)
	_ backend.QuantizedAttention = (*Backend)(nil)
	_ backend.TurboAttention     = (*Backend)(nil)
)

// Backend is the pure-Go CPU backend. It computes every op during the call
// (Eval has nothing left to do) and is not safe for concurrent use.
type Backend struct {
	high     bool // Precision "high": float64 accumulation
	fast     bool // Precision "fast": int8 activations in the quantized matmul, FMA in the dense one
	threads  int  // worker goroutines for Matmul
	closed   bool
	pack     bool  // fast without Options.NoPackWeights: pack every matrix whose copy replaces the original (packSlot)
	packRef  bool  // reference without Options.NoPackWeights: pack the 16-bit dense weights (denseSlot) and the 4-bit group-32 quantized ones (packSlot) the one-row kernels read packed
	packed   int64 // Stats.PackedBytes
	released int64 // Stats.ReleasedBytes

	life *tracker    // scopes, Release, Stats and the safety net
	pool *pool       // storage of released arrays, for reuse
	tmps [][]float32 // scratch of the op in progress (see scratchF32)
	tape *tape       // the gradient tape recording ops, nil when none (grad.go)
}

// Precisions lists the accepted values of backend.Options.Precision.
var Precisions = []string{"", "reference", "high", "fast"}

// AutoKVDType is the dtype mlxgo's commands and benchmarks keep a float32
// model's full KV caches in on this backend at precision
// (nn.CacheOptions.KVDType, --kv-dtype auto): bfloat16 in "fast", which is
// approximate already (int8 activations) and whose attention reads
// bfloat16 keys in place, scoring them in bfloat16 products where the CPU
// has AVX512_BF16 (half the bytes of float32 keys, as llama.cpp's default
// float16 cache); 0 (stored as computed, mlx_lm's) in the others.
func AutoKVDType(precision string) tensor.DType {
	if precision == "fast" {
		return tensor.BF16
	}
	return 0
}

// New opens a CPU backend. Options.Precision is "" or "reference" (float32
// accumulation, MLX's semantics), "high" (float64 accumulation) or "fast"
// (approximate: the quantized matmul with transposed weights quantizes its
// activations to int8 per block of 32, see the package doc);
// Options.Device must be "" or "cpu"; Options.Threads caps the worker
// goroutines (0 means GOMAXPROCS). Threads > 0 also sets the worker count of
// the shared kernel package, which is process-wide.
func New(opts backend.Options) (*Backend, error) {
	b := &Backend{pool: newPool()}
	b.life = lifetime.New[*Array, *buffer]("cpu", hooks{b})
	switch opts.Precision {
	case "", "reference":
	case "high":
		b.high = true
	case "fast":
		b.fast = true
	default:
		return nil, fmt.Errorf("cpu backend: unknown precision %q (want %q, %q, %q or %q)", opts.Precision, "", "reference", "high", "fast")
	}
	switch opts.Device {
	case "", "cpu":
	default:
		return nil, fmt.Errorf("cpu backend: unknown device %q (want %q or %q)", opts.Device, "", "cpu")
	}
	if opts.Threads < 0 {
		return nil, fmt.Errorf("cpu backend: Threads is %d (want 0 for GOMAXPROCS, or a positive count)", opts.Threads)
	}
	b.threads = opts.Threads
	if opts.PackWeights && opts.NoPackWeights {
		return nil, fmt.Errorf("cpu backend: PackWeights and NoPackWeights are both set (want at most one)")
	}
	b.pack = b.fast && !opts.NoPackWeights // Options.PackWeights asks for the default
	b.packRef = !b.fast && !b.high && !opts.NoPackWeights
	if b.threads == 0 {
		b.threads = runtime.GOMAXPROCS(0)
	} else {
		kernel.SetThreads(opts.Threads)
	}
	return b, nil
}

// PackWeightsSupported reports whether Options.PackWeights packs anything on
// this CPU (it needs AVX-512 with VNNI; elsewhere it does nothing).
func PackWeightsSupported() bool { return kernel.PackSupported() }

// DensePackingSupported reports whether the "reference" backend packs its
// float16 and bfloat16 dense weights on this CPU (unless NoPackWeights): it
// needs the AVX-512 dense kernels (with F16C).
func DensePackingSupported() bool { return kernel.DensePackReplaces(kernel.F16Vec([]uint16{0})) }

// DenseAMXPackingSupported reports whether the "fast" backend packs its
// float16 and bfloat16 dense weights on this CPU (unless NoPackWeights),
// for its AMX kernel: it needs AMX-BF16, which Linux grants on request
// (kernel.DenseAMXReplaces; MLXGO_NO_AMX=1 turns it off).
func DenseAMXPackingSupported() bool {
	return kernel.DenseAMXReplaces(kernel.F16Vec([]uint16{0}), 32)
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// SlowPaths names each quantized matmul combination (bits, group size,
// scale dtype, precision) that has run whole on the portable loops in this
// process because no assembly kernel of this CPU covers it
// (backend.SlowPathReporter). The record is per process, shared by every
// CPU backend.
func (b *Backend) SlowPaths() []string {
	var out []string
	for _, s := range kernel.SlowPaths() {
		out = append(out, "quantized matmul "+s)
	}
	return out
}

// OracleExact is false: the CPU backend implements every op itself and is
// held to the tolerance table (conformance.BudgetFor).
func (b *Backend) OracleExact() bool { return false }

// Do runs fn inline: the CPU backend has no thread of its own.
func (b *Backend) Do(fn func() error) error { return fn() }

// Close releases every array still alive and closes every open scope. Using
// the backend or any of its arrays afterwards panics with an *OpError.
// Closing twice is allowed.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.life.Close()
	b.closed = true
	b.pool.clear()
	b.tmps = nil
	return nil
}

// acc returns the accumulation mode of the kernels.
func (b *Backend) acc() kernel.Acc {
	switch {
	case b.high:
		return kernel.AccF64
	case b.fast:
		return kernel.AccQ8
	}
	return kernel.AccF32
}
