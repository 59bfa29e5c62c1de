package lifetime

import (
	"slices"

	"github.com/mlxgo/mlxgo/backend"
)

// scopeHead is the part of a Scope an array's State points to.
type scopeHead struct {
	depth  int // 0 for the outermost scope
	closed bool
}

// Scope is a backend.Scope: it frees its arrays at Close.
type Scope[A Array, R any] struct {
	scopeHead
	t      *Tracker[A, R]
	parent *Scope[A, R] // nil for the outermost scope
	arrays []A          // every array made in it or kept into it (some since released or kept out)
}

// Open opens a scope nested in the innermost open one.
func (t *Tracker[A, R]) Open() *Scope[A, R] {
	s := &Scope[A, R]{t: t}
	if n := len(t.spare); n > 0 {
		s.arrays = t.spare[n-1]
		t.spare = t.spare[:n-1]
	}
	if n := len(t.scopes); n > 0 {
		s.parent = t.scopes[n-1]
		s.depth = s.parent.depth + 1
	}
	t.scopes = append(t.scopes, s)
	return s
}

// Keep moves arrays of this scope to the enclosing one (or to the outermost
// level) and returns the first. Arrays that already belong to an enclosing
// scope or to the outermost level stay where they are. Keeping a released
// array, an array of a still-open inner scope, or keeping on a closed scope
// panics with an *backend.OpError.
func (s *Scope[A, R]) Keep(arrays ...backend.Array) backend.Array {
	t := s.t
	if !t.hooks.OnThread() {
		xs := slices.Clone(arrays) // the caller's slice stays on its stack
		t.hooks.Run("Keep", func() { s.Keep(xs...) })
	} else {
		s.keep(arrays)
	}
	if len(arrays) == 0 {
		return nil
	}
	return arrays[0]
}

func (s *Scope[A, R]) keep(arrays []backend.Array) {
	t := s.t
	for i := range arrays {
		t.Arg("Keep", arrays, i)
	}
	if s.closed {
		panic(backend.Errorf("Keep", slices.Clone(arrays), "scope is closed"))
	}
	for _, x := range arrays {
		a := x.(A)
		st := a.state()
		switch {
		case st.scope == &s.scopeHead:
			if p := s.parent; p != nil {
				st.scope = &p.scopeHead
				p.arrays = append(p.arrays, a)
			} else {
				st.scope = nil
				t.addRoot(a, st)
			}
		case st.scope != nil && st.scope.depth > s.depth:
			panic(backend.Errorf("Keep", slices.Clone(arrays), "array belongs to an inner scope that is still open"))
		}
	}
}

// Close frees every array of the scope that was not kept, in one Hooks.Free
// call. Inner scopes still open are closed first. Closing twice, or after
// the tracker closed, does nothing.
func (s *Scope[A, R]) Close() {
	t := s.t
	if s.closed || t.closed {
		s.closed = true
		return
	}
	if !t.hooks.OnThread() {
		t.hooks.Run("Close", s.Close)
		return
	}
	if at := slices.Index(t.scopes, s); at >= 0 {
		for len(t.scopes) > at+1 {
			t.scopes[len(t.scopes)-1].Close()
		}
		t.scopes = t.scopes[:at]
	}
	// Gather the arrays it still owns at the front of its list.
	owned := s.arrays[:0]
	for _, a := range s.arrays {
		if st := a.state(); st.scope == &s.scopeHead {
			st.released = true
			st.scope = nil
			owned = append(owned, a)
		}
	}
	if len(owned) > 0 {
		t.stats.LiveArrays -= len(owned)
		t.stats.LiveBytes -= t.hooks.Free(owned)
	}
	clear(s.arrays)
	if cap(s.arrays) > 0 && len(t.spare) < maxSpare {
		t.spare = append(t.spare, s.arrays[:0])
	}
	s.arrays = nil
	s.closed = true
	t.Drain()
}
