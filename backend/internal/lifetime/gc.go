package lifetime

import (
	"runtime"
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
