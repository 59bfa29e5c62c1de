package backend

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Array is a backend-owned n-dimensional array. Its dtype and shape are known
// as soon as the op that makes it returns, even on a lazy backend.
type Array interface {
	DType() tensor.DType
	Shape() tensor.Shape
}

// Options configure a backend when it is opened. Zero values mean defaults.
type Options struct {
	// Precision selects the arithmetic of backends that offer several:
	// "" or "reference" (MLX's semantics: float32 accumulation, each op's
	// output rounded to its dtype), "high" (float64 accumulation, for
	// numerical debugging). Backends reject values they do not know.
	Precision string
	// Threads caps the worker goroutines of a CPU backend; 0 means GOMAXPROCS.
	Threads int
	// Device selects the device of a backend with several ("cpu", "gpu");
	// "" means the backend's default (MLX: the GPU when it has one).
	Device string
	// PackWeights asks the "fast" CPU backend to pack its quantized
	// weights, which it does by default (see NoPackWeights); kept so that
	// callers that set it keep working.
	PackWeights bool
	// NoPackWeights turns off the default packing of the "fast" CPU
	// backend (AVX-512 VNNI; elsewhere nothing is packed): each quantized
	// weight matrix read from a file that its int8 kernels take (4- and
	// 8-bit, groups of whole blocks of 32) is rearranged into their panel
	// layout by its first matmul (Stats.PackedBytes), read from there at
	// every number of rows, and the file's pages that held it go back to
	// the operating system (Stats.ReleasedBytes), so that the weights stay
	// in memory once, as llama.cpp repacks its weights on load. Packed,
	// 8-bit and group-64+ matrices compute every row in the int8 GEMM's
	// order (a row's bits do not depend on the batch); without packing
	// their rows take the one-row kernels' order up to four rows and the
	// GEMM's past that (both within the fast precision's bound). It also
	// turns off the "reference" CPU backend's packing of float16 and
	// bfloat16 dense weights (on CPUs with its AVX-512 kernels): each such
	// matrix of a file that nn.Dense or a tied head multiplies is stored by
	// its first matmul in tiles of sixteen rows, column by column, and read
	// from there (the same bits; the file's pages go back likewise), and
	// its packing of 4- and 8-bit quantized weights (AVX-512 VNNI: 4-bit
	// groups of 32, 64 and 128, 8-bit groups of 32, 64 and 128) into the
	// fast backend's panels, read from there at every number of rows in
	// the reference order (the same bits).
	NoPackWeights bool
}

// Backend is the full contract. Every op is required: a backend that lacks one
// does not compile (each asserts var _ backend.Backend = (*T)(nil)).
type Backend interface {
	// Name is the registry name ("cpu", "mlx").
	Name() string
	// Do runs fn on the backend's thread and returns its error.
	Do(fn func() error) error
	// Close releases everything the backend holds. Arrays become invalid.
	Close() error
	// OracleExact reports the fidelity tier the backend declares: true when
	// it runs the oracle's own kernels, in the oracle's order and dtypes, on
	// the device the oracle's fixtures were made on (MLX on its CPU device),
	// so its results must equal the fixtures bit for bit; false when it is
	// held to the tolerance table instead.
	OracleExact() bool

	Memory
	Elementwise
	Shaping
	Reducing
	Linalg
	Fused
	Quantized
}

// Memory is host transfer, evaluation and lifetime.
type Memory interface {
	// FromHost copies a host tensor into a new array.
	FromHost(t *tensor.Dense) Array
	// Borrow wraps host memory without copying where the backend can: t must
	// stay valid and unmodified for the array's lifetime (memory-mapped
	// weights). A backend that cannot alias copies, and says so in its docs.
	Borrow(t *tensor.Dense) Array
	// ToHost evaluates a and returns its contents in a new host tensor.
	ToHost(a Array) (*tensor.Dense, error)
	// Eval computes the given arrays (a no-op on an eager backend).
	Eval(arrays ...Array) error
	// Scope opens a scope: arrays made from now until Close belong to it.
	Scope() Scope
	// Release frees arrays now. Releasing twice, or releasing nil, is allowed.
	Release(arrays ...Array)
	// Stats reports live arrays and bytes.
	Stats() Stats

	// Zeros returns an array of zeros.
	Zeros(shape tensor.Shape, dt tensor.DType) Array
	// Full returns an array filled with v (rounded to dt).
	Full(shape tensor.Shape, v float64, dt tensor.DType) Array
}

// Scope owns the arrays made while it is the innermost open scope.
type Scope interface {
	// Keep moves arrays to the enclosing scope (or to the outermost level,
	// where only Release frees them) and returns the first, for chaining.
	Keep(arrays ...Array) Array
	// Close releases every array of the scope not kept. Scopes close in
	// reverse order of opening; closing twice is allowed.
	Close()
}

// Stats is a snapshot of a backend's memory.
type Stats struct {
	LiveArrays int   // arrays made and not yet released
	LiveBytes  int64 // bytes they own (borrowed memory not counted)
	PeakBytes  int64 // the most LiveBytes has been since the backend opened
	LeakedByGC int   // arrays freed by the garbage-collector safety net
	// PackedBytes is the memory of weights kept rearranged beside their
	// arrays (Options.PackWeights), freed with them.
	PackedBytes int64
	// ReleasedBytes is the memory of a file's mapping given back to the
	// operating system because the packed copy replaced what it held (the
	// mapping stays valid: a page read again maps again from the file).
	ReleasedBytes int64
}

// UnaryOp names an elementwise function of one array.
type UnaryOp int

// The unary ops, with MLX's names.
const (
	Exp UnaryOp = iota
	Log
	Negative
	Abs
	Sqrt
	Rsqrt
	Square
	Sigmoid // 1/(1+exp(-x)), computed as MLX does to avoid overflow
	SiLU    // x*sigmoid(x)
	Tanh
	Sin
	Cos
)

var unaryNames = [...]string{"exp", "log", "negative", "abs", "sqrt", "rsqrt", "square", "sigmoid", "silu", "tanh", "sin", "cos"}

func (op UnaryOp) String() string {
	if op < 0 || int(op) >= len(unaryNames) {
		return "unary(?)"
	}
	return unaryNames[op]
}

// BinaryOp names an elementwise function of two arrays.
type BinaryOp int

// The binary ops, with MLX's names. Comparisons return Bool arrays.
const (
	Add BinaryOp = iota
	Subtract
	Multiply
	Divide
	Maximum
	Minimum
	Equal
	Less
	Greater
)

var binaryNames = [...]string{"add", "subtract", "multiply", "divide", "maximum", "minimum", "equal", "less", "greater"}

func (op BinaryOp) String() string {
	if op < 0 || int(op) >= len(binaryNames) {
		return "binary(?)"
	}
	return binaryNames[op]
}

// Elementwise ops broadcast numpy-style and promote dtypes as MLX does.
type Elementwise interface {
	// Binary applies op to a and b after broadcasting them together.
	Binary(op BinaryOp, a, b Array) Array
	// Unary applies op elementwise; the output has x's dtype.
	Unary(op UnaryOp, x Array) Array
	// AsType converts x to dt (floats round to nearest even).
	AsType(x Array, dt tensor.DType) Array
	// Where picks a where cond is true and b elsewhere (cond broadcast, Bool).
	Where(cond, a, b Array) Array
}

// Shaping ops move data without arithmetic.
type Shaping interface {
	// Reshape gives x a new shape of the same size; one dimension may be -1.
	Reshape(x Array, shape ...int) Array
	// Transpose permutes the axes of x.
	Transpose(x Array, axes ...int) Array
	// Slice takes x[start[i]:stop[i]] on every axis (step 1).
	Slice(x Array, start, stop []int) Array
	// SliceUpdate returns a copy of dst with src written at start (MLX's
	// slice_update; functional, dst is unchanged). A backend may reuse dst's
	// storage when dst has no other reader; callers must not use dst after.
	SliceUpdate(dst, src Array, start []int) Array
	// Concatenate joins arrays along axis.
	Concatenate(axis int, xs ...Array) Array
	// Take gathers whole slices of x along axis at integer indices (any
	// shape): the result's shape replaces x's axis by indices' shape.
	Take(x, indices Array, axis int) Array
}

// Reducing ops reduce along one axis.
type Reducing interface {
	Sum(x Array, axis int, keepDims bool) Array
	Max(x Array, axis int, keepDims bool) Array
	// Argmax returns the uint32 index of the largest element; ties go to the
	// smallest index (MLX's rule).
	Argmax(x Array, axis int, keepDims bool) Array
	// LogSumExp is log(sum(exp(x))) computed stably in float32, output in x's dtype.
	LogSumExp(x Array, axis int, keepDims bool) Array
	// Softmax along axis; precise accumulates in float32 for low-precision
	// inputs (mx.softmax(precise=True)). Output in x's dtype.
	Softmax(x Array, axis int, precise bool) Array
}

// Linalg is dense matrix multiplication.
type Linalg interface {
	// Matmul multiplies the last two axes, broadcasting the batch axes
	// (mx.matmul). Output dtype is the promotion of the inputs.
	Matmul(a, b Array) Array
}

// Fused ops follow mx.fast.
type Fused interface {
	// RMSNorm is mx.fast.rms_norm: weight ⊙ T(x·rsqrt(mean(x²)+eps)) over the
	// last axis, statistics in float32; weight has x's last dimension.
	RMSNorm(x, weight Array, eps float32) Array
	// RoPE is mx.fast.rope on x [B, H, L, D] (or any [..., L, D]).
	RoPE(x Array, p RoPE, offset Offset) Array
	// ScaledDotProductAttention is mx.fast.scaled_dot_product_attention:
	// q [B, H, L, D], k and v [B, Hk, S, D] with H a multiple of Hk (query
	// head h reads KV head h/(H/Hk), without materialising repeated heads).
	ScaledDotProductAttention(q, k, v Array, scale float32, mask Mask) Array
	// SwiGLU is mlx_lm's compiled swiglu: silu(gate) * up, each step rounded
	// to the array dtype as the compiled kernel does.
	SwiGLU(gate, up Array) Array
}

// Quantized ops use MLX's affine format (see the package doc).
type Quantized interface {
	// Quantize quantizes w [..., n] along its last axis (mx.quantize).
	Quantize(w Array, groupSize, bits int) QuantizedArray
	// Dequantize expands q to its scales' dtype (mx.dequantize).
	Dequantize(q QuantizedArray) Array
	// QuantizedMatmul is mx.quantized_matmul: x @ Wᵀ when transpose (W
	// stored [N, K], quantized along K), else x @ W (W stored [K, N],
	// quantized along N). It reads the packed codes directly and never
	// materialises the dequantized weight.
	QuantizedMatmul(x Array, w QuantizedArray, transpose bool) Array
}

// QuantizedArray is an affine-quantized matrix: packed uint32 codes and
// per-group scales and biases.
type QuantizedArray struct {
	W, Scales, Biases Array
	GroupSize, Bits   int
}

// Dims returns the logical [rows, cols] of the quantized matrix.
func (q QuantizedArray) Dims() (rows, cols int) {
	s := q.W.Shape()
	return s[len(s)-2], s[len(s)-1] * 32 / q.Bits
}

// RoPE parameterises rotary position embedding (mx.fast.rope).
type RoPE struct {
	Dims        int     // leading features rotated; the rest pass through
	Traditional bool    // rotate pairs (2i, 2i+1) instead of (i, i+Dims/2)
	Base        float32 // inv_freq_i = Base^(-2i/Dims); ignored when Freqs is set
	Scale       float32 // positions are multiplied by Scale
	Freqs       Array   // optional float32 [Dims/2]: inv_freq_i = 1/Freqs[i]
}

// Offset is the position of the first token of each row: a scalar, or one
// int32 per batch row (Rows, shape [B]) for left-padded batches.
type Offset struct {
	Scalar int
	Rows   Array
}

// Mask selects which keys each query may attend to.
type Mask interface{ isMask() }

// NoMask lets every query attend to every key.
type NoMask struct{}

// CausalMask lets query i of L attend to key j of S iff j <= i + (S - L)
// (lower-right aligned, as MLX's "causal").
type CausalMask struct{}

// ArrayMask is an explicit mask broadcastable to [B, H, L, S]: a Bool array
// (true = attend) or a float array added to the scores.
type ArrayMask struct{ A Array }

// PrefixMask is the block-sparse mask of a prefix-shared sequence (one
// sequence holding a prompt and several responses to it, each read as if
// alone after the prompt): L = S = Prefix + Σ Blocks positions, a prefix
// of Prefix positions followed by blocks of Blocks[k] positions. Query i
// attends to key j iff j <= i and j lies in the prefix or in query i's own
// block: the prefix is causal, and each block sees the whole prefix and
// itself causally, never another block. Attentions skip the keys it
// hides (the CPU backend a block of keys at a time, MLX as one causal
// attention over the prefix and one over each block after the prefix's
// keys); backends without such a path lower it to the equivalent Bool
// array (Dense). A, when not nil, is that array already on the backend
// (made once for many calls), which they read instead; it must equal
// Dense.
type PrefixMask struct {
	Prefix int
	Blocks []int
	A      Array
}

func (NoMask) isMask()     {}
func (CausalMask) isMask() {}
func (ArrayMask) isMask()  {}
func (PrefixMask) isMask() {}

// Len is the mask's sequence length, Prefix + Σ Blocks.
func (m PrefixMask) Len() int {
	n := m.Prefix
	for _, l := range m.Blocks {
		n += l
	}
	return n
}

// Check returns an error unless the prefix is not negative, every block
// holds at least one position and the length is n.
func (m PrefixMask) Check(n int) error {
	if m.Prefix < 0 {
		return fmt.Errorf("prefix mask: prefix of %d positions", m.Prefix)
	}
	for k, l := range m.Blocks {
		if l < 1 {
			return fmt.Errorf("prefix mask: block %d of %d positions", k, l)
		}
	}
	if m.Len() != n {
		return fmt.Errorf("prefix mask of %d positions (prefix %d, blocks %v) for %d", m.Len(), m.Prefix, m.Blocks, n)
	}
	return nil
}

// BlockStart is the first position that query i sees outside the prefix:
// the start of its block, or 0 when i is in the prefix.
func (m PrefixMask) BlockStart(i int) int {
	if i < m.Prefix {
		return 0
	}
	s := m.Prefix
	for _, l := range m.Blocks {
		if i < s+l {
			return s
		}
		s += l
	}
	return s
}

// Visible reports whether query i attends to key j.
func (m PrefixMask) Visible(i, j int) bool {
	return j <= i && (j < m.Prefix || j >= m.BlockStart(i))
}

// Dense is the mask as a Bool [L, L] array (true = attend).
func (m PrefixMask) Dense() *tensor.Dense {
	n := m.Len()
	d := make([]byte, n*n)
	for i := range n {
		bs := m.BlockStart(i)
		for j := 0; j <= i; j++ {
			if j < m.Prefix || j >= bs {
				d[i*n+j] = 1
			}
		}
	}
	return &tensor.Dense{DType: tensor.Bool, Shape: tensor.Shape{n, n}, Data: d}
}

// QuantizedAttention is implemented by backends with a fused attention over
// affine-quantized keys and values (a quantized KV cache): q [B, H, L, D];
// keys and values quantized along their last axis as Quantize makes them
// (W [B, Hk, S, D·bits/32], scales and biases [B, Hk, S, D/groupSize]),
// read without dequantizing the whole window; scale and mask as in
// ScaledDotProductAttention. Its numerics are the backend's fused
// attention's on the dequantized values, not those of mlx_lm's
// quantized_scaled_dot_product_attention (quantized matmuls and a softmax
// over a materialised [L, S] score matrix, each rounded to the dtype),
// which nn.QuantizedSDPA composes on backends without it.
type QuantizedAttention interface {
	QuantizedScaledDotProductAttention(q Array, keys, values QuantizedArray, scale float32, mask Mask) Array
}

// RowAttention is implemented by backends with a fused attention over rows
// that each have keys and values of their own (a batch of per-row KV
// caches): q [B, H, L, D]; keys[r] [1, Hk, S_r, D] and values[r]
// [1, Hk, S_r, Dv] for row r; scale and mask (NoMask or CausalMask) as in
// ScaledDotProductAttention on each row alone. The result [B, H, L, Dv]
// holds, row after row, what ScaledDotProductAttention gives each row
// alone, value for value. AttendRows uses it where a backend has it.
type RowAttention interface {
	ScaledDotProductAttentionRows(q Array, keys, values []Array, scale float32, mask Mask) Array
}

// AttendRows attends row r of q ([B, H, L, D]) to keys[r] and values[r]
// ([1, Hk, S_r, ·]) under mask (NoMask or CausalMask, per row): through
// b's RowAttention when it has one, else row by row (Slice, then
// ScaledDotProductAttention, then Concatenate along axis 0). The result is
// b's.
func AttendRows(b Backend, q Array, keys, values []Array, scale float32, mask Mask) Array {
	if ra, ok := b.(RowAttention); ok {
		return ra.ScaledDotProductAttentionRows(q, keys, values, scale, mask)
	}
	return AttendRowsComposed(b, q, keys, values, scale, mask)
}

// AttendRowsComposed is AttendRows row by row through b's
// ScaledDotProductAttention: the definition a RowAttention matches (and
// what one may fall back to, for example while recording gradients).
func AttendRowsComposed(b Backend, q Array, keys, values []Array, scale float32, mask Mask) Array {
	qs := q.Shape()
	if len(qs) != 4 || qs[0] != len(keys) || len(values) != len(keys) {
		panic(Errorf("AttendRows", []Array{q}, "q of shape %v for %d key and %d value arrays, want [%d, H, L, D]", qs, len(keys), len(values), len(keys)))
	}
	if len(keys) == 1 {
		return b.ScaledDotProductAttention(q, keys[0], values[0], scale, mask)
	}
	outs := make([]Array, len(keys))
	for r := range keys {
		qr := b.Slice(q, []int{r, 0, 0, 0}, []int{r + 1, qs[1], qs[2], qs[3]})
		outs[r] = b.ScaledDotProductAttention(qr, keys[r], values[r], scale, mask)
		b.Release(qr)
	}
	out := b.Concatenate(0, outs...)
	b.Release(outs...)
	return out
}

// SharedMatmuler is implemented by backends that multiply one x by several
// quantized weight matrices, transposed, in one call (the projections of a
// layer that read the same input: q, k and v; gate and up).
// QuantizedMatmulsT(x, ws)[i] is QuantizedMatmul(x, ws[i], true), bit for
// bit; a backend may quantize x once for all of them and run their rows in
// one parallel pass.
type SharedMatmuler interface {
	QuantizedMatmulsT(x Array, ws []QuantizedArray) []Array
}

// QuantizedMatmulsT returns QuantizedMatmul(x, ws[i], true) for every i:
// through b's SharedMatmuler when it has one, else one call each.
func QuantizedMatmulsT(b Backend, x Array, ws []QuantizedArray) []Array {
	if sm, ok := b.(SharedMatmuler); ok {
		return sm.QuantizedMatmulsT(x, ws)
	}
	return QuantizedMatmulsTComposed(b, x, ws)
}

// QuantizedMatmulsTComposed is QuantizedMatmulsT one QuantizedMatmul at a
// time: the definition a SharedMatmuler matches.
func QuantizedMatmulsTComposed(b Backend, x Array, ws []QuantizedArray) []Array {
	out := make([]Array, len(ws))
	for i, w := range ws {
		out[i] = b.QuantizedMatmul(x, w, true)
	}
	return out
}

// RowUpdater is implemented by backends that write a batch's rows into
// arrays of their own in one call (the new keys or values of a decode step
// into each row's KV cache). SliceUpdateRows(dsts, src, axis, at) returns,
// for every row r, what SliceUpdate(dsts[r], src[r:r+1], start) returns,
// start being at[r] on axis and 0 elsewhere; dsts[r] has a leading
// dimension of 1 and is consumed as SliceUpdate consumes dst. The result
// for row r may be dsts[r] itself, written in place where nothing else
// reads its storage; it then stays in the scope (or at the level) dsts[r]
// was in, where a new array would belong to the innermost open scope. As
// after SliceUpdate, the caller releases each dsts[r] that is not its
// result.
type RowUpdater interface {
	SliceUpdateRows(dsts []Array, src Array, axis int, at []int) []Array
}

// SliceUpdateRows is RowUpdater's operation through b's RowUpdater when it
// has one, else SliceUpdateRowsComposed.
func SliceUpdateRows(b Backend, dsts []Array, src Array, axis int, at []int) []Array {
	if ru, ok := b.(RowUpdater); ok {
		return ru.SliceUpdateRows(dsts, src, axis, at)
	}
	return SliceUpdateRowsComposed(b, dsts, src, axis, at)
}

// SliceUpdateRowsComposed is SliceUpdateRows row by row through b's Slice
// and SliceUpdate: the definition a RowUpdater matches.
func SliceUpdateRowsComposed(b Backend, dsts []Array, src Array, axis int, at []int) []Array {
	CheckSliceUpdateRows(src, len(dsts), axis, at)
	ss := src.Shape()
	out := make([]Array, len(dsts))
	start, stop, at0 := make([]int, len(ss)), ss.Clone(), make([]int, len(ss))
	for r, d := range dsts {
		start[0], stop[0] = r, r+1
		row := b.Slice(src, start, stop)
		at0[axis] = at[r]
		out[r] = b.SliceUpdate(d, row, at0)
		b.Release(row)
	}
	return out
}

// CheckSliceUpdateRows panics with an *OpError unless src ([B, ...]) has a
// row for each of n arrays, at holds one position for each, and axis is
// one of src's axes: the arguments' check every SliceUpdateRows makes.
func CheckSliceUpdateRows(src Array, n, axis int, at []int) {
	ss := src.Shape()
	if len(ss) == 0 || ss[0] != n || len(at) != n || axis < 0 || axis >= len(ss) {
		panic(Errorf("SliceUpdateRows", []Array{src}, "src of shape %v for %d arrays and %d positions on axis %d, want [%d, ...] and an axis of it", ss, n, len(at), axis, n))
	}
}

// TurboKV is the live window of a TurboQuant KV cache (nn.TurboKVCache,
// the codec of package nn/turboquant) as TurboAttention reads it. Parts are
// [B, Hk, S, ·] each, in the cache's persistence order: key codes (int8 for
// 8-bit keys, else uint8, D·KBits/8 bytes a row), key scales and zero
// points (float16, D/32 a row), value codes (uint8, D·VBits/8 bytes a row)
// and value scales (float16, D/32 a row). DType is the activation dtype the
// decoded keys and values are rounded to (as the cache's decoded window
// is); Rotated leaves the values in the rotated domain (the deferred read),
// else each value row is un-rotated as it is decoded (the eager read).
type TurboKV struct {
	Parts        [5]Array
	KBits, VBits int
	DType        tensor.DType
	Rotated      bool
}

// TurboAttention is implemented by backends with a fused attention over a
// TurboQuant KV cache read in place, a block of rows at a time, never the
// whole window: the result is the backend's ScaledDotProductAttention of q
// over the window decoded into arrays of kv.DType, bit for bit; q [B, H, L,
// D], scale and mask as there.
type TurboAttention interface {
	TurboScaledDotProductAttention(q Array, kv TurboKV, scale float32, mask Mask) Array
}

// AsyncEvaler is implemented by lazy backends that can start computing
// without waiting (mx.async_eval), so generation can pipeline decode steps.
type AsyncEvaler interface {
	AsyncEval(arrays ...Array) error
}

// HostReader is implemented by backends that can copy an array's values
// into a caller's buffer: a decode step's rows of logits read back into the
// same memory every step (ToHost returns new memory each time, which the
// operating system hands out page by page).
type HostReader interface {
	// ReadFloat32 writes a's elements, row-major, as float32 (the values
	// AsType(a, F32) holds) to dst, which must hold exactly a's size.
	ReadFloat32(dst []float32, a Array) error
}

// SlowPathReporter is implemented by backends whose fast kernels do not
// cover every combination of an op on every CPU. SlowPaths names, sorted,
// each combination that has run on a slow path in this process, so that a
// program can say so once.
type SlowPathReporter interface {
	SlowPaths() []string
}

// CacheClearer is implemented by backends that keep freed buffers in a cache
// for reuse (MLX). ClearCache returns them to the system; generation calls it
// where mlx_lm calls mx.clear_cache (after the prompt, and every 256 tokens),
// so that peak memory stays near what is live.
type CacheClearer interface {
	ClearCache()
}
