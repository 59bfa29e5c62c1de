package backend

// Func is a function of arrays that a [Differentiator] can differentiate:
// it computes its outputs from its inputs with the backend's ops only (an
// array it reads that is not among its inputs is a constant). It must not
// release its inputs; it may open and close scopes for its intermediates.
type Func func(inputs []Array) ([]Array, error)

// Differentiator is implemented by backends that compute gradients
// (mx.vjp, mx.value_and_grad and mx.checkpoint). Callers ask for it with a
// type assertion:
//
//	d, ok := b.(backend.Differentiator)
//
// fn receives fresh arrays holding the values of the inputs (so passing
// one array twice gives two independent inputs, as in MLX), and its
// outputs and the gradients are new arrays of the caller, in the scope
// open at the call. Gradients have the shape and dtype of their input.
// Only float inputs and outputs carry gradients; an op that has no
// gradient with respect to an argument that needs one (the packed codes,
// scales or biases of a quantized matmul, the indices of Take) makes the
// call return an error naming it. An *OpError panicking inside fn is
// returned as the call's error.
type Differentiator interface {
	// VJP calls fn(primals) and returns its outputs and the
	// vector-Jacobian products: for each primal, the sum over outputs i of
	// cotangents[i]ᵀ·∂outputs[i]/∂primal. cotangents has one array per
	// output, of the output's shape; a nil cotangent counts as zeros.
	VJP(fn Func, primals, cotangents []Array) (outputs, vjps []Array, err error)
	// ValueAndGrad calls fn(inputs) and returns its outputs and the
	// gradients of outputs[0], which must be a float scalar (shape []),
	// with respect to inputs[argnums[0]], inputs[argnums[1]], ... in that
	// order. The other inputs are constants.
	ValueAndGrad(fn Func, inputs []Array, argnums []int) (outputs, grads []Array, err error)
	// Checkpoint returns a function equal to fn whose intermediates are
	// not kept for the backward: a gradient through it calls fn again
	// (mx.checkpoint), trading compute for memory.
	Checkpoint(fn Func) Func
	// StopGradient returns an array holding x's values through which no
	// gradient flows (mx.stop_gradient): a constant to every transform.
	StopGradient(x Array) Array
}

// Compiler is implemented by backends that compile a function of arrays
// into one graph that later calls replay (mx.compile, shapeless=false):
//
//	c, ok := b.(backend.Compiler)
//
// The compiled function runs fn once per distinct list of input shapes
// and dtypes (a trace, on placeholder arrays) and replays that trace for
// every later call with the same shapes and dtypes, without calling fn.
// So everything that may change from one call to the next must be an
// input: an array fn reads that is not among its inputs, and any host
// value fn turns into an array, keeps its value from the trace. fn may
// differentiate (Differentiator) and checkpoint; it must not read
// arrays back to the host. The outputs are new arrays of the caller, in
// the scope open at the call; they equal fn's up to the rounding of the
// elementwise ops the backend fuses. release frees the compiled function
// and its traces; the function must not be called after it.
type Compiler interface {
	Compile(fn Func) (compiled Func, release func())
}

// CrossEntropyFuser is implemented by backends with a fused cross-entropy
// (mx.fast.cross_entropy), which mlx.nn.losses.cross_entropy, and so
// mlx_lm's loss, uses on a GPU:
//
//	f, ok := b.(backend.CrossEntropyFuser)
//
// FusesCrossEntropy says whether the backend's device has the fused kernel
// (where it does not, a caller following mlx_lm computes the loss op by
// op). FusedCrossEntropy returns, for logits [..., V] and int32 targets of
// the logits' shape less the last axis, logsumexp(logits) − logits[target]
// of each row in float32 (accumulated in float32), differentiable with
// respect to the logits.
type CrossEntropyFuser interface {
	FusesCrossEntropy() bool
	FusedCrossEntropy(logits, targets Array) Array
}
