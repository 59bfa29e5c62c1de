package lifetime

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// fake is the array of a fake backend: a name and a byte count.
type fake struct {
	State
	name  string
	bytes int64
}

func (a *fake) DType() tensor.DType { return tensor.U8 }

func (a *fake) Shape() tensor.Shape {
	if a == nil {
		return nil
	}
	return tensor.Shape{int(a.bytes)}
}

// other is an array of no tracker.
type other struct{}

func (*other) DType() tensor.DType { return tensor.F32 }
func (*other) Shape() tensor.Shape { return tensor.Shape{1} }

// fakeRoot is what an array at the outermost level leaves for Drop.
type fakeRoot struct {
	name  string
	bytes int64
}

// fakeHooks records what the tracker asks of the backend.
type fakeHooks struct {
	frees   [][]string // the names passed to each Free call
	dropped []string   // the names passed to Drop
	away    bool       // OnThread reports false (a call from another goroutine)
	hops    []string   // the ops handed to Run
	quiet   bool       // record nothing (for counting allocations)
}

func (h *fakeHooks) Free(arrays []*fake) int64 {
	var names []string
	var n int64
	for _, a := range arrays {
		if !h.quiet {
			names = append(names, a.name)
		}
		n += a.bytes
	}
	if !h.quiet {
		h.frees = append(h.frees, names)
	}
	return n
}

func (h *fakeHooks) Root(a *fake) fakeRoot { return fakeRoot{a.name, a.bytes} }

func (h *fakeHooks) Drop(r fakeRoot) int64 {
	h.dropped = append(h.dropped, r.name)
	return r.bytes
}

func (h *fakeHooks) OnThread() bool { return !h.away }

func (h *fakeHooks) Run(op string, fn func()) {
	h.hops = append(h.hops, op)
	h.away = false
	defer func() { h.away = true }()
	fn()
}

// fixture is a tracker of fake arrays with its hooks.
type fixture struct {
	t  *Tracker[*fake, fakeRoot]
	h  *fakeHooks
	by map[string]*fake
}

func newFixture() *fixture {
	h := &fakeHooks{}
	return &fixture{t: New[*fake, fakeRoot]("fake", h), h: h, by: map[string]*fake{}}
}

// add makes an array of n bytes called name.
func (f *fixture) add(name string, n int64) *fake {
	a := &fake{name: name, bytes: n}
	f.t.Add(a, n)
	f.by[name] = a
	return a
}

// freed returns the names freed so far, by Free or Drop, sorted.
func (f *fixture) freed() []string {
	var out []string
	for _, names := range f.h.frees {
		out = append(out, names...)
	}
	out = append(out, f.h.dropped...)
	slices.Sort(out)
	return out
}

// opPanic runs fn and returns the *backend.OpError it panics with.
func opPanic(t *testing.T, fn func()) (oe *backend.OpError) {
	t.Helper()
	defer func() {
		r := recover()
		err, _ := r.(error)
		if !errors.As(err, &oe) {
			t.Fatalf("got panic %v, want an *backend.OpError", r)
		}
	}()
	fn()
	return nil
}

func TestLifetimes(t *testing.T) {
	cases := []struct {
		name  string
		run   func(f *fixture)
		freed []string       // sorted
		frees int            // Free calls
		stats backend.Stats  // at the end
		roots int            // arrays at the outermost level at the end
		depth int            // open scopes at the end
		check func(*fixture) // more, optional
	}{
		{
			name: "scope frees its arrays in one call",
			run: func(f *fixture) {
				s := f.t.Open()
				f.add("a", 1)
				f.add("b", 2)
				f.add("c", 4)
				s.Close()
			},
			freed: []string{"a", "b", "c"}, frees: 1,
			stats: backend.Stats{PeakBytes: 7},
		},
		{
			name: "keep moves to the enclosing scope",
			run: func(f *fixture) {
				outer := f.t.Open()
				inner := f.t.Open()
				x := f.add("x", 1)
				f.add("y", 1)
				if got := inner.Keep(x); got != x {
					panic(fmt.Sprintf("Keep returned %v, want its first argument", got))
				}
				inner.Close()
				if Released(&x.State) {
					panic("x released by the inner scope")
				}
				outer.Close()
			},
			freed: []string{"x", "y"}, frees: 2,
			stats: backend.Stats{PeakBytes: 2},
		},
		{
			name: "keep out of the outermost scope gives a root",
			run: func(f *fixture) {
				s := f.t.Open()
				f.add("x", 8)
				s.Keep(f.by["x"])
				s.Close()
			},
			stats: backend.Stats{LiveArrays: 1, LiveBytes: 8, PeakBytes: 8}, roots: 1,
		},
		{
			name: "arrays of enclosing scopes and roots stay where they are",
			run: func(f *fixture) {
				r := f.add("r", 1)
				outer := f.t.Open()
				o := f.add("o", 1)
				inner := f.t.Open()
				inner.Keep(r, o)
				inner.Close()
				if Released(&o.State) || Released(&r.State) {
					panic("inner Close freed an array it did not own")
				}
				outer.Close()
			},
			freed: []string{"o"}, frees: 1,
			stats: backend.Stats{LiveArrays: 1, LiveBytes: 1, PeakBytes: 2}, roots: 1,
		},
		{
			name: "close closes the inner scopes first",
			run: func(f *fixture) {
				outer := f.t.Open()
				f.add("o", 1)
				f.t.Open()
				f.add("i", 1)
				outer.Close()
				outer.Close() // twice is fine
			},
			freed: []string{"i", "o"}, frees: 2,
			stats: backend.Stats{PeakBytes: 2},
		},
		{
			name: "release is idempotent and a released array is not freed by its scope",
			run: func(f *fixture) {
				s := f.t.Open()
				x := f.add("x", 3)
				f.add("y", 5)
				f.t.Release(x, nil, (*fake)(nil), x)
				f.t.ReleaseOne(x)
				s.Close()
			},
			freed: []string{"x", "y"}, frees: 2,
			stats: backend.Stats{PeakBytes: 8},
		},
		{
			name: "release of a root disarms the safety net",
			run: func(f *fixture) {
				f.add("r", 2)
				f.t.Release(f.by["r"])
			},
			freed: []string{"r"}, frees: 1,
			stats: backend.Stats{PeakBytes: 2},
		},
		{
			name: "shared storage counts once",
			run: func(f *fixture) {
				s := f.t.Open()
				f.add("a", 10)
				f.t.Add(&fake{name: "view"}, 0)
				s.Close()
			},
			freed: []string{"a", "view"}, frees: 1,
			stats: backend.Stats{PeakBytes: 10},
		},
		{
			name: "close drops the roots and frees the scopes",
			run: func(f *fixture) {
				f.add("r", 1)
				f.t.Open()
				f.add("s", 2)
				f.t.Close()
				f.t.Close()
				f.t.Release(f.by["r"], f.by["s"]) // after Close: nothing to do
			},
			freed: []string{"r", "s"}, frees: 1,
			stats: backend.Stats{PeakBytes: 3},
			check: func(f *fixture) {
				if !slices.Equal(f.h.dropped, []string{"r"}) {
					panic(fmt.Sprintf("Drop got %v, want [r]", f.h.dropped))
				}
				if !Released(&f.by["r"].State) || !Released(&f.by["s"].State) || !f.t.closed {
					panic("after Close an array or the tracker is not released/closed")
				}
			},
		},
		{
			name: "abandon frees nothing",
			run: func(f *fixture) {
				f.add("r", 1)
				s := f.t.Open()
				f.add("s", 2)
				f.t.Abandon()
				s.Close()
			},
			stats: backend.Stats{LiveArrays: 2, LiveBytes: 3, PeakBytes: 3}, depth: 1,
		},
		{
			name: "keep and close off the thread hop to it",
			run: func(f *fixture) {
				outer := f.t.Open()
				inner := f.t.Open()
				x := f.add("x", 1)
				f.h.away = true
				inner.Keep(x)
				inner.Close()
				outer.Close()
				f.h.away = false
			},
			freed: []string{"x"}, frees: 1,
			stats: backend.Stats{PeakBytes: 1},
			check: func(f *fixture) {
				if !slices.Equal(f.h.hops, []string{"Keep", "Close", "Close"}) {
					panic(fmt.Sprintf("hops %v, want [Keep Close Close]", f.h.hops))
				}
			},
		},
		{
			name: "closed scopes' lists are reused, at most maxSpare of them",
			run: func(f *fixture) {
				first := f.t.Open()
				for i := range 2 * maxSpare {
					f.add(fmt.Sprint(i), 0)
					f.t.Open()
				}
				first.Close()
			},
			frees: 2 * maxSpare, // every scope but the innermost (empty) one had an array
			stats: backend.Stats{}, depth: 1,
			check: func(f *fixture) {
				if len(f.t.spare) != maxSpare {
					panic(fmt.Sprintf("%d spare lists, want %d", len(f.t.spare), maxSpare))
				}
				s := f.t.Open()
				if cap(s.arrays) == 0 {
					panic("a new scope did not reuse a spare list")
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			f := newFixture()
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatal(r)
					}
				}()
				c.run(f)
				if c.check != nil {
					c.check(f)
				}
			}()
			if c.freed != nil || c.frees != 0 {
				if got := f.freed(); c.freed != nil && !slices.Equal(got, c.freed) {
					t.Errorf("freed %v, want %v", got, c.freed)
				}
				if len(f.h.frees) != c.frees {
					t.Errorf("%d Free calls %v, want %d", len(f.h.frees), f.h.frees, c.frees)
				}
			} else if got := f.freed(); len(got) != 0 {
				t.Errorf("freed %v, want nothing", got)
			}
			if got := f.t.Stats(); got != c.stats {
				t.Errorf("stats %+v, want %+v", got, c.stats)
			}
			if got := f.t.Roots(); got != c.roots {
				t.Errorf("%d roots, want %d", got, c.roots)
			}
			if got := f.t.Depth(); got != c.depth {
				t.Errorf("%d open scopes, want %d", got, c.depth)
			}
		})
	}
}

// Misuse panics with an *backend.OpError whose message says what is wrong.
func TestMisuse(t *testing.T) {
	f, f2 := newFixture(), newFixture()
	x := f.add("x", 1)
	gone := f.add("gone", 1)
	f.t.Release(gone)
	foreign := f2.add("foreign", 1)
	s := f.t.Open()
	inner := f.t.Open()
	in := f.add("in", 1)
	closed := f.t.Open()
	closed.Close()
	cases := []struct {
		name string
		fn   func()
		op   string
		want string
	}{
		{"nil", func() { f.t.Arg("exp", []backend.Array{x, nil}, 1) }, "exp", "argument 1 is nil"},
		{"typed nil", func() { f.t.Arg("exp", []backend.Array{(*fake)(nil)}, 0) }, "exp", "argument 0 is nil"},
		{"other type", func() { f.t.Arg("exp", []backend.Array{&other{}}, 0) }, "exp", "argument 0 is a *lifetime.other, not an array of this fake backend"},
		{"foreign", func() { f.t.Arg("add", []backend.Array{x, foreign}, 1) }, "add", "argument 1 belongs to another backend"},
		{"released", func() { f.t.Arg("sum", []backend.Array{gone}, 0) }, "sum", "argument 0 was released"},
		{"release foreign", func() { f.t.Release(foreign) }, "Release", "not an array of this fake backend"},
		{"release other type", func() { f.t.Release(&other{}) }, "Release", "not an array of this fake backend"},
		{"keep released", func() { s.Keep(gone) }, "Keep", "argument 0 was released"},
		{"keep on a closed scope", func() { closed.Keep(x) }, "Keep", "scope is closed"},
		{"keep an inner scope's array", func() { s.Keep(in) }, "Keep", "array belongs to an inner scope that is still open"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			oe := opPanic(t, c.fn)
			if oe.Op != c.op || oe.Err == nil || oe.Err.Error() != c.want {
				t.Errorf("got op %q, %v; want op %q, %q", oe.Op, oe.Err, c.op, c.want)
			}
		})
	}
	if got := f.t.Arg("exp", []backend.Array{in}, 0); got != in {
		t.Errorf("Arg of a live array returned %v, want it", got)
	}
	inner.Close()
	s.Close()
	f.t.Close()
	if oe := opPanic(t, func() { f.t.Arg("exp", []backend.Array{x}, 0) }); oe.Err.Error() != "backend is closed" {
		t.Errorf("Arg of a root after Close: got %v, want backend is closed", oe.Err)
	}
	if oe := opPanic(t, func() { f.t.Arg("exp", []backend.Array{in}, 0) }); oe.Err.Error() != "argument 0 was released" {
		t.Errorf("Arg of a scope's array after Close: got %v, want argument 0 was released", oe.Err)
	}
}

// The hot paths do not allocate: checking arguments, an op's result made
// and released in a scope, or kept to the enclosing scope; a scope costs
// its own allocation, its list coming from a closed one.
func TestNoAllocations(t *testing.T) {
	f := newFixture()
	f.h.quiet = true
	x := f.add("x", 1)
	outer := f.t.Open()
	defer outer.Close()
	const runs = 100
	cases := []struct {
		name string
		fn   func(a *fake)
		want float64 // allocations per run
	}{
		{"Arg", func(*fake) {
			xs := [...]backend.Array{x, x}
			f.t.Arg("add", xs[:], 0)
			f.t.Arg("add", xs[:], 1)
		}, 0},
		{"Release", func(a *fake) {
			f.t.Add(a, 1)
			f.t.Release(a)
		}, 0},
		{"Keep", func(a *fake) {
			inner := f.t.scopes[len(f.t.scopes)-1]
			f.t.Add(a, 1)
			inner.Keep(a)
		}, 0},
		{"Scope", func(a *fake) {
			s := f.t.Open()
			f.t.Add(a, 1)
			s.Close()
		}, 1},
	}
	for _, c := range cases {
		inner := f.t.Open()
		arrays := make([]fake, runs+1) // AllocsPerRun runs once more to warm up
		i := 0
		got := testing.AllocsPerRun(runs, func() {
			c.fn(&arrays[i])
			i++
		})
		if got != c.want {
			t.Errorf("%s: got %v allocations, want %v", c.name, got, c.want)
		}
		inner.Close()
	}
}

// collect runs the garbage collector until the tracker has queued want
// notes (or 5 seconds pass) and returns how many it queued.
func collect(tr *Tracker[*fake, fakeRoot], want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for tr.Queued() < want && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	return tr.Queued()
}

// The safety net: an array at the outermost level dropped unreleased is
// queued by its cleanup, and only the tracker's next call applies the note
// (Drop, the counts, LeakedByGC). Released arrays are never counted.
func TestSafetyNet(t *testing.T) {
	f := newFixture()
	func() {
		for i := range 4 {
			f.t.Add(&fake{name: fmt.Sprint("lost", i), bytes: 10}, 10)
		}
	}()
	kept := f.add("kept", 100)
	f.t.Release(f.add("released", 1000))
	f.by = nil
	if got := collect(f.t, 4); got != 4 {
		t.Fatalf("the safety net queued %d notes, want 4", got)
	}
	if len(f.h.dropped) != 0 || f.t.Roots() != 5 {
		t.Fatalf("before the tracker's next call: Drop got %v, %d roots; want nothing, 5", f.h.dropped, f.t.Roots())
	}
	st := f.t.Stats()
	want := backend.Stats{LiveArrays: 1, LiveBytes: 100, PeakBytes: 1140, LeakedByGC: 4}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	slices.Sort(f.h.dropped)
	if !slices.Equal(f.h.dropped, []string{"lost0", "lost1", "lost2", "lost3"}) {
		t.Errorf("Drop got %v, want the four lost arrays", f.h.dropped)
	}
	if f.t.Queued() != 0 || f.t.Roots() != 1 {
		t.Errorf("%d notes queued, %d roots after Stats; want 0, 1", f.t.Queued(), f.t.Roots())
	}
	f.t.Release(kept)
	if st := f.t.Stats(); st.LiveArrays != 0 || st.LiveBytes != 0 || st.LeakedByGC != 4 {
		t.Errorf("after releasing the last root: %+v, want nothing live, 4 leaked", st)
	}
}

// Arrays in an open scope get no root and no cleanup (the scope holds
// them); an array dropped after Close queues nothing.
func TestSafetyNetOnlyAtOutermostLevel(t *testing.T) {
	f := newFixture()
	s := f.t.Open()
	func() {
		for range 10 {
			f.t.Add(&fake{name: "scoped", bytes: 1}, 1)
		}
	}()
	if n := f.t.Roots(); n != 0 {
		t.Errorf("%d roots for arrays in a scope, want 0", n)
	}
	s.Close()
	gone := make(chan struct{})
	func() {
		a := &fake{name: "root", bytes: 1}
		f.t.Add(a, 1)
		runtime.AddCleanup(a, func(c chan struct{}) { close(c) }, gone)
	}()
	f.t.Close()
	deadline := time.After(5 * time.Second)
	for collected := false; !collected; {
		runtime.GC()
		select {
		case <-gone:
			collected = true
		case <-deadline:
			t.Fatal("the dropped root was not collected in 5 s")
		case <-time.After(time.Millisecond):
		}
	}
	time.Sleep(10 * time.Millisecond) // its own cleanup may run just after ours
	if n := f.t.Queued(); n != 0 {
		t.Errorf("%d notes queued after Close, want 0", n)
	}
	if st := f.t.Stats(); st.LiveArrays != 0 || st.LeakedByGC != 0 {
		t.Errorf("stats %+v, want nothing live or leaked", st)
	}
}

// dropTraced makes an array at the outermost level and drops it unreleased
// (its name is what the leak trace must report).
func dropTraced(f *fixture) {
	f.t.Add(&fake{name: "lost", bytes: 10}, 10)
}

// The leak trace (TraceLeaksEnv): an array the safety net frees is
// reported with the function that made it; a released array, or one kept
// by a scope, is not, and leaves no record behind.
func TestLeakTrace(t *testing.T) {
	t.Setenv(TraceLeaksEnv, "1")
	f := newFixture()
	if f.t.trace == nil {
		t.Fatalf("%s=1: no trace", TraceLeaksEnv)
	}
	var out strings.Builder
	f.t.trace.w = &out
	dropTraced(f)
	kept := f.add("kept", 1)
	f.t.Release(f.add("released", 1))
	s := f.t.Open()
	f.add("scoped", 1)
	s.Close()
	f.by = nil
	if got := collect(f.t, 1); got != 1 {
		t.Fatalf("the safety net queued %d notes, want 1", got)
	}
	f.t.Stats()
	report := out.String()
	if strings.Count(report, "an array was dropped without Release") != 1 || !strings.Contains(report, "lifetime.dropTraced") || !strings.Contains(report, "lifetime_test.go:") {
		t.Errorf("report %q: want one leak, made in dropTraced (lifetime_test.go)", report)
	}
	f.t.Release(kept)
	if n := len(f.t.trace.made); n != 0 {
		t.Errorf("%d stacks recorded once no root is left, want 0", n)
	}
	for _, v := range []string{"", "0"} {
		t.Setenv(TraceLeaksEnv, v)
		if newFixture().t.trace != nil {
			t.Errorf("%s=%q: the trace is on", TraceLeaksEnv, v)
		}
	}
}
