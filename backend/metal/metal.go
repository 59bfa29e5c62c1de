//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/internal/lifetime"
)

func init() {
	backend.Register("mlx", func(o backend.Options) (backend.Backend, error) { return New(o) })
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.AsyncEvaler  = (*Backend)(nil)
	_ backend.CacheClearer = (*Backend)(nil)
)

// Backend runs MLX through the mlx-c API. All MLX work happens on one
// goroutine locked to its OS thread (MLX's streams and compile cache belong to
// a thread); ops called from any other goroutine are handed to it and waited
// for. It is not safe for concurrent use, except Do, which serialises.
type Backend struct {
	device string // "cpu" or "gpu"
	w      *worker
	s      C.mlx_stream // the stream every op runs on; made on the worker

	silu, swiglu C.mlx_closure          // compiled lazily, shapeless
	compiled     map[*compiled]struct{} // Compile's functions not yet released

	// rec holds the stream and receives the result of the op being
	// recorded (C memory, which the op's cgo call writes); args holds Concatenate's input handles,
	// dead the handles a closing scope frees in one call and evals the
	// arrays of an Eval or AsyncEval.
	rec               *C.mlxgo_recorder
	args, dead, evals handles

	ops    uint64   // ops recorded through exec (OpsRecorded)
	life   *tracker // scopes, Release, Stats and the safety net
	closed bool
}

// New opens an MLX backend. Options.Device is "" (the GPU when MLX has one,
// else the CPU), "gpu" (an error without one) or "cpu". Options.Precision must
// be "" or "reference": MLX has one arithmetic. Options.Threads is not used
// (MLX sizes its own thread pools) and must not be negative.
func New(opts backend.Options) (*Backend, error) {
	switch opts.Precision {
	case "", "reference":
	default:
		return nil, fmt.Errorf("mlx backend: unknown precision %q (want %q or %q)", opts.Precision, "", "reference")
	}
	if opts.Threads < 0 {
		return nil, fmt.Errorf("mlx backend: Threads is %d (want 0 or more)", opts.Threads)
	}
	switch opts.Device {
	case "", "cpu", "gpu":
	default:
		return nil, fmt.Errorf("mlx backend: unknown device %q (want %q, %q or %q)", opts.Device, "", "cpu", "gpu")
	}
	b := &Backend{w: startWorker()}
	b.life = lifetime.New[*Array, root]("mlx", hooks{b})
	err := b.w.do(func() error {
		gpu := C.mlx_device_new_type(C.MLX_GPU, 0)
		defer C.mlx_device_free(gpu)
		var cavail C.bool
		if C.mlx_device_is_available(&cavail, gpu) != 0 {
			cavail = false
			C.mlxgo_clear_error()
		}
		avail := bool(cavail)
		switch {
		case opts.Device == "gpu" && !avail:
			return errors.New("mlx backend: device \"gpu\" requested but this MLX build has no GPU backend")
		case opts.Device == "cpu" || !avail:
			b.device = "cpu"
			b.s = C.mlx_default_cpu_stream_new()
		default:
			b.device = "gpu"
			b.s = C.mlx_default_gpu_stream_new()
		}
		if b.s.ctx == nil {
			return fmt.Errorf("mlx backend: opening the %s stream: %w", b.device, takeError())
		}
		b.rec = (*C.mlxgo_recorder)(C.calloc(1, C.sizeof_mlxgo_recorder))
		if b.rec == nil {
			C.mlx_stream_free(b.s)
			return errors.New("mlx backend: out of memory")
		}
		b.rec.s = b.s
		return nil
	})
	if err != nil {
		b.w.stop()
		return nil, err
	}
	return b, nil
}

// Name returns "mlx".
func (b *Backend) Name() string { return "mlx" }

// OracleExact is true on MLX's CPU device on linux/amd64, where the oracle's
// fixtures are made (conformance/oracle): the same libmlx running the same
// ops in the same order gives the same bits. Elsewhere the kernels differ
// from the fixtures' (Metal, CUDA, MLX's CPU kernels for arm64), so the
// backend is held to the tolerance table there.
func (b *Backend) OracleExact() bool {
	return b.device == "cpu" && runtime.GOOS == "linux" && runtime.GOARCH == "amd64"
}

// Device returns the device the ops run on: "gpu" or "cpu".
func (b *Backend) Device() string { return b.device }

// Do runs fn on the MLX thread and returns its error. A panic in fn is raised
// again in the caller. Calls from several goroutines run one at a time; a
// call from inside fn runs inline.
func (b *Backend) Do(fn func() error) error {
	if b.closed {
		return &backend.OpError{Op: "Do", Err: errors.New("backend is closed")}
	}
	return b.w.do(fn)
}

// run runs fn on the MLX thread (inline when already there). After Close it
// panics with an *OpError.
func (b *Backend) run(fn func()) {
	if b.closed {
		panic(&backend.OpError{Op: "mlx", Err: errors.New("backend is closed")})
	}
	b.w.do(func() error { fn(); return nil })
}

// Close releases every array still alive, the compiled functions and the
// stream, and stops the MLX thread. Arrays become invalid; using the backend
// afterwards panics with an *OpError. Closing twice is allowed.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	if b.w.exited() {
		b.closed = true
		b.life.Abandon()
		return fmt.Errorf("mlx backend: Close: %w; its arrays could not be freed", errThreadExited)
	}
	b.run(func() {
		b.life.Close()
		for c := range b.compiled {
			b.freeCompiled(c)
		}
		for _, f := range []*C.mlx_closure{&b.silu, &b.swiglu} {
			if f.ctx != nil {
				C.mlx_closure_free(*f)
				f.ctx = nil
			}
		}
		C.mlx_synchronize(b.s)
		C.mlx_stream_free(b.s)
		b.s.ctx = nil
		C.free(unsafe.Pointer(b.rec))
		b.rec = nil
		b.args.free()
		b.dead.free()
		b.evals.free()
		C.mlxgo_clear_error()
	})
	b.closed = true
	b.w.stop()
	return nil
}

// OpsRecorded returns how many ops the backend has recorded through its op
// entry points since it opened (one per Backend op call that builds an MLX
// op; the primitives MLX adds inside an op are in GraphOps). Read it on the
// MLX thread or while no op runs.
func (b *Backend) OpsRecorded() uint64 { return b.ops }

// Version returns the version of the MLX library linked in.
func (b *Backend) Version() string {
	var v string
	b.run(func() {
		s := C.mlx_string_new()
		defer C.mlx_string_free(s)
		if C.mlx_version(&s) == 0 {
			v = C.GoString(C.mlx_string_data(s))
		}
		C.mlxgo_clear_error()
	})
	return v
}

// MemoryStats are MLX's own allocator counters.
type MemoryStats struct {
	Active int64 // bytes held by live MLX buffers
	Peak   int64 // the most Active has been since the last ResetPeakMemory
	Cache  int64 // bytes freed by MLX but kept for reuse
}

// Memory reads MLX's allocator counters.
func (b *Backend) Memory() MemoryStats {
	var m MemoryStats
	b.run(func() {
		var a, p, c C.size_t
		if C.mlxgo_memory(&a, &p, &c) != 0 {
			panic(&backend.OpError{Op: "Memory", Err: takeError()})
		}
		m = MemoryStats{int64(a), int64(p), int64(c)}
	})
	return m
}

// ClearCache returns MLX's cached buffers to the system.
func (b *Backend) ClearCache() {
	b.run(func() {
		if C.mlx_clear_cache() != 0 {
			panic(&backend.OpError{Op: "ClearCache", Err: takeError()})
		}
	})
}

// ResetPeakMemory restarts MemoryStats.Peak from the current active bytes.
func (b *Backend) ResetPeakMemory() {
	b.run(func() {
		if C.mlx_reset_peak_memory() != 0 {
			panic(&backend.OpError{Op: "ResetPeakMemory", Err: takeError()})
		}
	})
}

// Error is a failure reported by MLX, with its message.
type Error struct{ Msg string }

func (e *Error) Error() string { return "mlx: " + e.Msg }

// takeError returns the message MLX reported on this thread since the last
// call, and clears it. It must run on the MLX thread.
func takeError() error {
	msg := trimSourceLocation(C.GoString(C.mlxgo_error()))
	C.mlxgo_clear_error()
	if msg == "" {
		msg = "call failed without a message"
	}
	return &Error{Msg: msg}
}

// mlxcLocation matches the " at <file>:<line>" that mlx-c (not mlxgo's own
// subset) appends to each message: the line of its wrapper that caught the
// exception, in the source tree it was built from.
var mlxcLocation = regexp.MustCompile(` at [^ ]+\.(?:cpp|cc|c|h):[0-9]+$`)

// trimSourceLocation drops mlx-c's source location from msg, so that both
// builds report MLX's message alone.
func trimSourceLocation(msg string) string { return mlxcLocation.ReplaceAllString(msg, "") }

// errorHandler installs mlxgo's error handler (mlxgo.c's on_error) once.
var errorHandler sync.Once

// worker is one goroutine locked to its OS thread that runs every MLX call.
type worker struct {
	calls chan func()
	g     atomic.Uintptr // curg of the worker goroutine while it runs, else 0
	done  chan struct{}
	// dead is set before a Goexit'ed call reports back: from then on the
	// goroutine's identity may be reused by another one, so do must not
	// compare it.
	dead atomic.Bool
}

func startWorker() *worker {
	w := &worker{calls: make(chan func()), done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer func() {
			w.g.Store(0)
			close(w.done)
		}()
		// Never unlocked: the thread ends with the goroutine, and MLX's
		// thread-local state with it.
		runtime.LockOSThread()
		w.g.Store(curg())
		// mlx-c's handler is one process-wide setting, written without a
		// lock: install it once, not from each backend's thread at once.
		errorHandler.Do(func() { C.mlxgo_install_error_handler() })
		close(ready)
		for f := range w.calls {
			f()
		}
	}()
	<-ready
	return w
}

// errThreadExited is returned once the MLX thread has ended because a
// function given to Do called runtime.Goexit (t.Fatal, for one): its MLX
// state is gone with it, so the backend cannot go on.
var errThreadExited = errors.New("the MLX thread exited: a function run by Do called runtime.Goexit (t.Fatal?)")

// do runs fn on the worker's thread, inline if already there, and re-raises
// its panic in the caller.
func (w *worker) do(fn func() error) error {
	if w.dead.Load() {
		panic(&backend.OpError{Op: "mlx", Err: errThreadExited})
	}
	if w.here() {
		return fn()
	}
	type result struct {
		err   error
		panic any
		stack []byte
	}
	ch := make(chan result, 1)
	call := func() {
		var r result
		returned := false
		defer func() {
			if r.panic = recover(); r.panic != nil {
				r.stack = debug.Stack()
			} else if !returned {
				w.dead.Store(true)
				r.err = errThreadExited
			}
			ch <- r
		}()
		r.err = fn()
		returned = true
	}
	select {
	case w.calls <- call:
	case <-w.done:
		panic(&backend.OpError{Op: "mlx", Err: errThreadExited})
	}
	r := <-ch
	if r.panic != nil {
		if _, ok := r.panic.(*backend.OpError); ok {
			panic(r.panic)
		}
		panic(&ThreadPanic{Value: r.panic, Stack: r.stack})
	}
	return r.err
}

// here reports whether the caller is the worker goroutine (so MLX calls may
// run inline), without a cgo call.
func (w *worker) here() bool { return curg() == w.g.Load() && !w.dead.Load() }

// ThreadPanic carries a panic other than *backend.OpError raised on the MLX
// thread to the goroutine that handed it the work, with the thread's stack.
type ThreadPanic struct {
	Value any
	Stack []byte
}

func (p *ThreadPanic) Error() string {
	return fmt.Sprintf("panic on the MLX thread: %v\n%s", p.Value, p.Stack)
}

// exited reports whether the worker goroutine has ended.
func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *worker) stop() {
	select {
	case <-w.done:
	default:
		close(w.calls)
		<-w.done
	}
}
