package lifetime

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// notes is the safety net's queue: the root ids of arrays the garbage
// collector found unreachable and unreleased. The cleanups append to it
// from a runtime goroutine; the tracker empties it on the backend's thread.
// It holds no pointer to an array, or none could be collected.
type notes struct {
	mu      sync.Mutex
	ids     []uint64
	closed  bool        // the tracker closed: later notes are dropped
	pending atomic.Bool // ids is not empty (read without the lock)
}

// note is a cleanup's argument.
type note struct {
	q  *notes
	id uint64
}

// lost is the cleanup of an array at the outermost level: it only queues
// the array's root id.
func lost(n note) {
	q := n.q
	q.mu.Lock()
	if !q.closed {
		q.ids = append(q.ids, n.id)
		q.pending.Store(true)
	}
	q.mu.Unlock()
}

func (q *notes) close() {
	q.mu.Lock()
	q.closed, q.ids = true, nil
	q.pending.Store(false)
	q.mu.Unlock()
}

// addRoot puts a (with State st) at the outermost level: it gets a root id,
// its Root is kept for Drop, and the safety net is armed.
func (t *Tracker[A, R]) addRoot(a A, st *State) {
	t.next++
	st.root = t.next
	t.roots[st.root] = t.hooks.Root(a)
	st.cleanup = runtime.AddCleanup(st, lost, note{t.notes, st.root})
	if t.trace != nil {
		t.trace.record(st.root)
	}
}

// Drain applies the queued notes: each array the garbage collector found
// leaves the counts, adds one to Stats.LeakedByGC, and its Root goes to
// Hooks.Drop. Add, Release, Scope.Close and Stats drain; a backend calls it
// at its other entry points that should free leaked storage promptly (the
// MLX backend's Eval).
func (t *Tracker[A, R]) Drain() {
	q := t.notes
	if !q.pending.Load() {
		return
	}
	q.mu.Lock()
	ids := q.ids
	q.ids = nil
	q.pending.Store(false)
	q.mu.Unlock()
	for _, id := range ids {
		if r, ok := t.roots[id]; ok {
			delete(t.roots, id)
			t.stats.LiveArrays--
			t.stats.LeakedByGC++
			if t.trace != nil {
				t.trace.report(t.name, id)
			}
			t.stats.LiveBytes -= t.hooks.Drop(r)
		}
	}
}

// Roots returns the number of arrays at the outermost level (each with the
// safety net armed).
func (t *Tracker[A, R]) Roots() int { return len(t.roots) }

// Queued returns the number of notes the safety net queued that the tracker
// has not applied yet. Unlike the other methods it may be called from any
// goroutine.
func (t *Tracker[A, R]) Queued() int {
	t.notes.mu.Lock()
	defer t.notes.mu.Unlock()
	return len(t.notes.ids)
}

// TraceLeaksEnv names the environment variable that turns the leak trace
// on for every tracker made afterwards: set and not "0", each array the
// safety net frees is reported on standard error with the stack that made
// it (or kept it to the outermost level).
const TraceLeaksEnv = "MLXGO_TRACE_LEAKS"

// leakTrace records where each array at the outermost level came from, for
// the report the safety net writes when it frees one. It costs a stack
// walk per array reaching the outermost level, so it is off unless asked
// for (TraceLeaksEnv).
type leakTrace struct {
	w    io.Writer
	made map[uint64][]uintptr // by root id, while the array is a root
}

// newLeakTrace returns the trace TraceLeaksEnv asks for, or nil.
func newLeakTrace() *leakTrace {
	if v := os.Getenv(TraceLeaksEnv); v == "" || v == "0" {
		return nil
	}
	return &leakTrace{w: os.Stderr, made: map[uint64][]uintptr{}}
}

// record keeps the caller's stack for the root id.
func (lt *leakTrace) record(id uint64) {
	pcs := make([]uintptr, 32)
	lt.made[id] = pcs[:runtime.Callers(3, pcs)]
}

// report writes where the root id, freed by the safety net, was made: the
// frames outside this package's code and the runtime, at most 16.
func (lt *leakTrace) report(backendName string, id uint64) {
	var b strings.Builder
	fmt.Fprintf(&b, "mlxgo: %s backend: an array was dropped without Release (the garbage-collector safety net freed it); it was made or kept at:\n", backendName)
	frames, n := runtime.CallersFrames(lt.made[id]), 0
	for more := true; more && n < 16; {
		var f runtime.Frame
		f, more = frames.Next()
		if strings.HasPrefix(f.Function, "runtime.") || strings.Contains(f.Function, "/backend/internal/lifetime.") && !strings.HasSuffix(f.File, "_test.go") {
			continue // the tracker's own frames
		}
		fmt.Fprintf(&b, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		n++
	}
	delete(lt.made, id)
	io.WriteString(lt.w, b.String())
}
