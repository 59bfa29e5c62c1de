// Package metal is mlxgo's MLX backend, registered as "mlx": every op runs in
// MLX (Metal GPU where MLX has one, else MLX's default device; Options.Device
// "cpu" forces the CPU) through the mlx-c C API, with cgo.
//
// The package compiles only with the build tag mlx; without it only this
// file exists, so `go build ./...` works on machines without MLX. Programs
// that want the backend blank-import it from a file tagged mlx.
//
// # Building
//
// By default the mlx-c functions the backend calls come from mlxgo itself:
// mlxc.cpp implements them, with mlx-c's names and signatures (declared in
// mlxc/include/mlx/c/mlx.h), over MLX's C++ API from the pinned MLX wheel in
// the project virtualenv. `make venv` links .venv/mlx to the wheel's mlx
// directory (headers in include/, libmlx in lib/); then
//
//	go test -tags mlx ./backend/metal/
//
// The tag mlxc_system uses the system's mlx-c instead (macOS: `brew install
// mlx-c`; other prefixes through CGO_CFLAGS and CGO_LDFLAGS):
//
//	go build -tags mlx,mlxc_system ./...
//
// The two stay interchangeable: TestShimDeclarationsMatchMLXC finds every
// mlx-c function and type the package's C and cgo code uses and, given the
// real headers (MLXGO_MLXC_INCLUDE, the directory holding mlx/c/mlx.h, e.g.
// $(brew --prefix)/include), fails on any difference between the shim's
// declarations and mlx-c's; without them it skips loudly.
//
//	MLXGO_MLXC_INCLUDE=$(brew --prefix)/include go test -run TestShimDeclarations ./backend/metal/
//
// # Numerics
//
// The backend calls the MLX functions mlx_lm calls, in the same order with
// the same dtypes, so results are the same bits: mx.fast.rms_norm, rope
// (scalar and per-row array offsets), scaled_dot_product_attention,
// quantized_matmul, cross_entropy (on the GPU only, where
// mlx.nn.losses.cross_entropy takes it), and swiglu/silu compiled shapeless as mlx_lm's
// @partial(mx.compile, shapeless=True) functions are. Compile
// (backend.Compiler) is mx.compile of a Go function (mlx_compile over the
// same mlx_closure the gradients use), which the trainer compiles its
// step with, as mlx_lm does.
//
// # Threads, errors and memory
//
// MLX's streams and compile cache belong to one OS thread, so all MLX work
// runs on one goroutine locked to its thread: Backend.Do runs a function
// there, and ops called elsewhere are handed to it. mlx-c's default error
// handler (which exits the process) is replaced; every MLX failure becomes a
// Go error or an *backend.OpError panic naming the op. Arrays are freed by
// scopes and Release on the MLX thread (the lifetime layer the cpu backend
// shares, backend/internal/lifetime). Arrays at the outermost level (made
// with no scope open, or kept out of the outermost scope) also get a
// garbage-collector cleanup as a safety net, which only queues a note for
// that thread: its next op, Eval, Release, scope Close or Stats frees the
// forgotten handle and counts it in Stats.LeakedByGC. Arrays in a scope
// need none, since the scope keeps them until its Close frees them.
//
// # Cost per op
//
// A decode step records about a thousand lazy ops, so recording one is kept
// cheap (BenchmarkOpRecord): on the MLX thread an op checks it is there by
// comparing goroutine identities (package internal/goroutine) rather than
// calling C (hop, in ops.go, the one place where ops cross threads), and
// makes one cgo call, to the op's own C function (mlxgo.h: mlxgo_add,
// mlxgo_rope, ...), that records it and writes the result's handle, shape
// and dtype into a per-backend struct in C memory. That call's arguments
// hold no pointer cgo would check (array handles and that struct's address
// go as integers: a runtime.cgoCheckPointer per argument cost about 15% of
// an op). The only Go allocation is the Array (with its shape inline up to
// four dimensions); a scope frees its arrays in one cgo call at Close.
// ToHost evaluates and copies in place when the result is row-contiguous
// (no extra copy op on the device). OpsRecorded counts the ops recorded and
// GraphOps lists the primitives of a lazy graph by name (as
// mx.export_to_dot draws them), to compare the graphs mlxgo and mlx_lm
// build; BenchmarkModelDecodeBuild times recording a real model's decode
// step (MLXGO_BENCH_MODEL, MLXGO_BENCH_DEVICE).
package metal
