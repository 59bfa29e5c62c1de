package lifetime

import (
	"runtime"
	"slices"

	"github.com/mlxgo/mlxgo/backend"
)

// State is the lifetime part of an array: a backend's array struct embeds
// it, and only the Tracker reads or writes it.
type State struct {
	owner    *ledger    // the tracker that made it; nil until Add
	scope    *scopeHead // the scope that frees it; nil at the outermost level or once released
	root     uint64     // its key in the tracker's roots while at the outermost level
	released bool
	cleanup  runtime.Cleanup // the safety net, armed while root != 0
}

func (s *State) state() *State { return s }

// Array is the constraint on a backend's array type: a pointer to a struct
// that embeds State (which supplies the unexported method). Its DType and
// Shape must accept a nil pointer: error messages describe every argument,
// a typed nil one included.
type Array interface {
	comparable
	backend.Array
	state() *State
}

// Hooks is what a backend plugs into its Tracker. A is its array type, R
// what an array at the outermost level leaves behind for Drop.
type Hooks[A Array, R any] interface {
	// Free frees the storage of arrays the tracker has just marked released
	// and taken out of Stats.LiveArrays, and returns the bytes this takes
	// out of Stats.LiveBytes. Release passes one array; a scope's Close
	// passes all of its arrays at once.
	Free(arrays []A) int64
	// Root returns what Drop needs to free a's storage once a is gone. It
	// is called when a reaches the outermost level and must not point to a
	// (the safety net could never fire).
	Root(a A) R
	// Drop frees the storage an array at the outermost level held, given by
	// its Root, after the array was collected unreleased or when the tracker
	// closes with it alive, and returns the bytes this takes out of
	// Stats.LiveBytes.
	Drop(r R) int64
	// OnThread reports whether the caller may use the tracker now: the
	// backend is open and this is its thread (always true for a backend
	// without a thread of its own).
	OnThread() bool
	// Run runs fn on the backend's thread and waits for it; a closed
	// backend panics with an *backend.OpError naming op.
	Run(op string, fn func())
}

// ledger is the part of a Tracker that does not depend on the array type:
// what State points to, and what Stats reports.
type ledger struct {
	name   string // the backend's name, for messages
	closed bool
	stats  backend.Stats
}

// maxSpare caps the array lists of closed scopes kept for reuse.
const maxSpare = 64

// Tracker keeps the lifetimes of one backend's arrays. It is not safe for
// concurrent use: see the package doc for the thread rule.
type Tracker[A Array, R any] struct {
	ledger
	hooks  Hooks[A, R]
	scopes []*Scope[A, R] // open scopes, innermost last
	spare  [][]A          // array lists of closed scopes, for reuse
	one    [1]A           // Release's argument to Free
	next   uint64         // the last root id handed out
	roots  map[uint64]R   // the arrays at the outermost level, by root id
	notes  *notes         // the safety net's queue
	trace  *leakTrace     // where the roots were made (TraceLeaksEnv); nil: off
}

// New returns the tracker of a backend called name (for messages).
func New[A Array, R any](name string, hooks Hooks[A, R]) *Tracker[A, R] {
	return &Tracker[A, R]{ledger: ledger{name: name}, hooks: hooks, roots: map[uint64]R{}, notes: &notes{}, trace: newLeakTrace()}
}

// Add counts a, a new array holding bytes (0 when it shares storage that
// is already counted), and puts it in the innermost open scope, or at the
// outermost level with the safety net armed.
func (t *Tracker[A, R]) Add(a A, bytes int64) {
	t.Drain()
	st := a.state()
	st.owner = &t.ledger
	t.stats.LiveArrays++
	t.stats.LiveBytes += bytes
	t.stats.PeakBytes = max(t.stats.PeakBytes, t.stats.LiveBytes)
	if n := len(t.scopes); n > 0 {
		s := t.scopes[n-1]
		st.scope = &s.scopeHead
		s.arrays = append(s.arrays, a)
	} else {
		t.addRoot(a, st)
	}
}

// AddOutermost is Add at the outermost level whatever scopes are open,
// for arrays a transform holds across the caller's scopes (the gradient
// tape's saved values); only Release frees them.
func (t *Tracker[A, R]) AddOutermost(a A, bytes int64) {
	t.Drain()
	st := a.state()
	st.owner = &t.ledger
	t.stats.LiveArrays++
	t.stats.LiveBytes += bytes
	t.stats.PeakBytes = max(t.stats.PeakBytes, t.stats.LiveBytes)
	t.addRoot(a, st)
}

// Arg checks that args[i], argument i of op, is a live array of this
// tracker and returns it. Otherwise it panics with an *backend.OpError
// naming op and every argument; args is copied only then, so it can stay
// on the caller's stack.
func (t *Tracker[A, R]) Arg(op string, args []backend.Array, i int) A {
	a, ok := args[i].(A)
	var none A
	if ok && a != none {
		if st := a.state(); st.owner == &t.ledger && !st.released && !t.closed {
			return a
		}
	}
	panic(t.badArg(op, slices.Clone(args), i))
}

func (t *Tracker[A, R]) badArg(op string, xs []backend.Array, i int) *backend.OpError {
	a, ok := xs[i].(A)
	var none A
	switch {
	case xs[i] == nil || (ok && a == none):
		return backend.Errorf(op, xs, "argument %d is nil", i)
	case !ok:
		return backend.Errorf(op, xs, "argument %d is a %T, not an array of this %s backend", i, xs[i], t.name)
	case a.state().owner != &t.ledger:
		return backend.Errorf(op, xs, "argument %d belongs to another backend", i)
	case a.state().released:
		return backend.Errorf(op, xs, "argument %d was released", i)
	}
	return backend.Errorf(op, xs, "backend is closed")
}

// Release frees arrays now, as Backend.Release: nil and already released
// arrays are skipped, another backend's array panics.
func (t *Tracker[A, R]) Release(arrays ...backend.Array) {
	var none A
	for _, x := range arrays {
		if x == nil {
			continue
		}
		a, ok := x.(A)
		switch {
		case ok && a == none:
		case !ok || a.state().owner != &t.ledger:
			panic(backend.Errorf("Release", []backend.Array{x}, "not an array of this %s backend", t.name))
		default:
			t.ReleaseOne(a)
		}
	}
	t.Drain()
}

// ReleaseOne frees a, an array of this tracker, now (idempotent).
func (t *Tracker[A, R]) ReleaseOne(a A) {
	st := a.state()
	if st.released || t.closed {
		return
	}
	st.released = true
	st.scope = nil
	if st.root != 0 {
		st.cleanup.Stop()
		delete(t.roots, st.root)
		if t.trace != nil {
			delete(t.trace.made, st.root)
		}
		st.root = 0
	}
	t.stats.LiveArrays--
	t.one[0] = a
	t.stats.LiveBytes -= t.hooks.Free(t.one[:])
	var none A
	t.one[0] = none
}

// Released reports whether the array of s has been freed: released, freed
// by its scope, or its tracker closed.
func Released(s *State) bool { return s.released || s.owner.closed }

// Stats applies the safety net's queued notes and returns the counts.
func (t *Tracker[A, R]) Stats() backend.Stats {
	t.Drain()
	return t.stats
}

// Depth returns the number of open scopes.
func (t *Tracker[A, R]) Depth() int { return len(t.scopes) }

// Close closes the open scopes, applies the queued notes and drops every
// array left at the outermost level (Hooks.Drop). Closing twice does
// nothing.
func (t *Tracker[A, R]) Close() {
	if t.closed {
		return
	}
	for len(t.scopes) > 0 {
		t.scopes[0].Close()
	}
	t.Drain()
	for id, r := range t.roots {
		delete(t.roots, id)
		t.stats.LiveArrays--
		t.stats.LiveBytes -= t.hooks.Drop(r)
	}
	t.Abandon()
}

// Abandon marks the tracker closed without freeing anything, for a backend
// that can no longer reach its storage (its thread is gone). The counts
// stay as they were.
func (t *Tracker[A, R]) Abandon() {
	t.closed = true
	t.notes.close()
	t.roots = nil
	t.trace = nil
	t.spare = nil
}
