// Package backendtest is the contract suite of backend.Backend, in the
// spirit of gonum's blas/testblas and ggml's test-backend-ops: one exported
// entry point, [Run], that every backend's tests call and must pass. A
// backend added later passes this suite and nothing else to meet the
// contract (the oracle fixtures of package conformance then measure its
// accuracy against MLX itself).
//
// # Running it on a backend
//
// From the backend's tests (an external test package avoids import cycles):
//
//	func TestContract(t *testing.T) {
//		backendtest.Run(t, func() (backend.Backend, error) {
//			return mybackend.New(backend.Options{})
//		})
//	}
//
// open is called once per subtest; each subtest closes its backend and
// checks at the end that nothing is left alive and nothing leaked. Run it
// for every mode whose arithmetic differs (backend/cpu runs "reference",
// "high" and "fast"). A mode that is approximate by design in some op calls
// [RunApproximate], which skips those ops loudly and checks everything else.
// `go test ./backend/cpu/ -run TestContract` and `go test -tags mlx
// ./backend/metal/ -run TestContract` run it; `make test` runs both.
//
// # What it checks
//
// Lifetime (Lifetime/...): Name, Do (runs its function, returns its error
// unchanged), OracleExact (a declared constant), Stats (arrays and bytes
// move by exactly the array sizes for Zeros, Full, FromHost and a float32
// op result, PeakBytes is a high-water mark, double Release and Release of
// nil change nothing), nested scopes and Keep (to the parent and through
// every level to the outermost), closing an outer scope closes the inner
// ones, Keep on a closed scope or of an open inner scope's array is an
// error, every use of a released, foreign or nil array is an
// *backend.OpError (which backend.Recover inside Do turns into an error)
// and not a crash, an op called against its contract names itself, its
// shapes and dtypes, the garbage-collector safety net counts an outermost
// array dropped without Release in LeakedByGC, 200 iterations of a small
// graph in a scope leave live arrays, bytes and the peak unchanged, Close
// invalidates every array and the backend, FromHost and ToHost copy and
// round-trip every dtype bit for bit, Borrow never lets an op write the
// host memory, Zeros and Full convert as astype does (hand-computed values),
// and AsyncEval and ClearCache where a backend implements them.
//
// Ops (Ops/...): every op of Elementwise, Shaping, Reducing, Linalg, Fused
// and Quantized on random shapes (seeded, reproducible; dimensions of 0 and
// 1 included), f32, f16 and bf16 (integers and Bool where the op takes
// them), numpy broadcasting, inputs made strided or offset by Transpose and
// Slice first, and edge values (NaN, ±Inf, -0, subnormals, the largest
// finite value) where the op's definition says what they give. Expected
// values come from a float64 evaluation of each op's definition, written
// out in this package (ref.go and each test) on the inputs as rounded to
// their dtype, independent of every backend: dtype promotion is
// backend.PromoteTypes' table, Argmax ties go to the smallest index (the
// first NaN wins), the causal mask is lower-right aligned, RoPE rotates
// pairs (i, i+Dims/2) or (2i, 2i+1) with scalar or per-row offsets, and
// quantization is MLX's affine scheme with MLX's bit packing (Quantize is
// MLX's algorithm in float32, checked bit for bit). Shaping ops, AsType,
// Where, Max, Argmax, comparisons and integer arithmetic must be exact.
// Float results are held to the suite's rows of conformance's tolerance
// table ("contract/<class>"): |got - want| <= Abs + Rel·(|want| + m), Rel in
// units of the output dtype's unit roundoff, m the magnitude scale each row
// names (Σ|terms| for sums and products); the rows carry the worst errors
// measured on both backends. backend.AttendRows (rows with keys and values
// of their own, through the backend's RowAttention where it has one) must
// give each row the bits ScaledDotProductAttention gives it alone
// (Ops/AttendRows), and backend.SliceUpdateRows (through a RowUpdater)
// each row what SliceUpdate writes (Ops/SliceUpdateRows), and
// backend.QuantizedMatmulsT (through a SharedMatmuler) each matrix what
// QuantizedMatmul gives it alone (Ops/QuantizedMatmulsT). Finally the same op on the same inputs must give the
// same bits twice (Ops/Deterministic).
//
// Gradients (Gradients/...), where the backend implements
// backend.Differentiator (a backend without it is skipped loudly): the VJP
// of each differentiable op (unary ops, Multiply with broadcasting, Divide,
// Sum, Matmul, Softmax, LogSumExp, Take, Slice/Concatenate/Transpose/
// Reshape, RMSNorm, SwiGLU, RoPE with a scalar and per-row offsets, causal
// SDPA with GQA, QuantizedMatmul w.r.t. x) on float32 inputs in random
// layouts, against the gradient worked out by hand in float64 loops, held
// to the row "contract/grad" against the gradient's scale; ValueAndGrad
// equal to VJP with a cotangent of one, gradients in argnums order (repeats
// allowed), a non-scalar loss and an argnum out of range are errors;
// Checkpoint gives the plain function's gradients bit for bit and runs the
// function again in the backward; the function's error and an *OpError
// panicking in it come back as the transform's error; an output without a
// cotangent still comes back, one array passed twice is two inputs, and no
// gradient flows through StopGradient.
//
// The suite never branches on Name. Where MLX itself departs from the
// mathematical definition (its float32 exp polynomial, steps rounded to
// half types), the tolerance row says so with a measured figure; where MLX
// rejects an input (zero-size arrays in Argmax and LogSumExp, float16
// SwiGLU gates beyond ±11.09 where its sigmoid overflows), the suite leaves
// it out and says so at the test.
//
// Set MLXGO_CONTRACT_MEASURE=1 to log each comparison's worst error as a
// fraction of its budget (how the rows' figures were measured).
package backendtest
