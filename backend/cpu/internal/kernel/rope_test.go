package kernel

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// TestRoPEHand: one token, x = [1, 2, 3, 4], Dims = 4, Freqs = [1, 4]
// (inv_freq = [1, 1/4]) at position 2 (offset 2, t = 0, Scale 1), so
// θ0 = 2·1 = 2 and θ1 = 2·0.25 = 0.5 (exact in float32).
//
//	traditional pairs (x0,x1), (x2,x3):  [1·c0−2·s0, 1·s0+2·c0, 3·c1−4·s1, 3·s1+4·c1]
//	non-traditional (x0,x2), (x1,x3):    [1·c0−3·s0, 2·c1−4·s1, 1·s0+3·c0, 2·s1+4·c1]
//
// with c0 = cos 2 = −0.41614684, s0 = sin 2 = 0.90929743, c1 = cos 0.5 =
// 0.87758256, s1 = sin 0.5 = 0.47942554.
func TestRoPEHand(t *testing.T) {
	c0, s0, c1, s1 := -0.41614684, 0.90929743, 0.87758256, 0.47942554
	want := map[bool][]float64{
		true:  {1*c0 - 2*s0, 1*s0 + 2*c0, 3*c1 - 4*s1, 3*s1 + 4*c1},
		false: {1*c0 - 3*s0, 2*c1 - 4*s1, 1*s0 + 3*c0, 2*s1 + 4*c1},
	}
	for _, trad := range []bool{true, false} {
		t.Run(fmt.Sprintf("traditional=%v", trad), func(t *testing.T) {
			p := RoPEParams{Dims: 4, Traditional: trad, Scale: 1, Freqs: []float32{1, 4}}
			got := make([]float32, 4)
			RoPE(got, []float32{1, 2, 3, 4}, 1, 1, 1, 4, p, []int{2}, Identity)
			for i, w := range want[trad] {
				if math.Abs(float64(got[i])-w) > 1e-6 {
					t.Errorf("got %v, want %v (index %d)", got[i], w, i)
				}
			}
		})
	}
}

// TestRoPEFloat64: against a float64 evaluation of the same formula
// (inv_freq = Base^(−2i/Dims), θ = pos·inv_freq): float32 θ is off by about
// 2^-24·θ, so the bound is (θ_max·2^-23 + 4·2^-24)·|x| plus the output rounding.
func TestRoPEFloat64(t *testing.T) {
	const b, h, l, d = 2, 3, 9, 64
	for _, dt := range testDTypes {
		for _, trad := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/traditional=%v", dt.name, trad), func(t *testing.T) {
				p := RoPEParams{Dims: 48, Traditional: trad, Base: 10000, Scale: 0.5}
				offsets := []int{7, 1000}
				x := randVec(newRand(2), b*h*l*d, 1, dt.round)
				got := make([]float32, len(x))
				RoPE(got, x, b, h, l, d, p, offsets, dt.round)
				half := p.Dims / 2
				u := ulpOf(1, dt.round) / 2
				for bi := range b {
					for hh := range h {
						for tk := range l {
							o := ((bi*h+hh)*l + tk) * d
							pos := 0.5 * float64(tk+offsets[bi])
							for i := range half {
								i1, i2 := i, i+half
								if trad {
									i1, i2 = 2*i, 2*i+1
								}
								th := pos * math.Pow(10000, -2*float64(i)/float64(p.Dims))
								x1, x2 := float64(x[o+i1]), float64(x[o+i2])
								w1 := x1*math.Cos(th) - x2*math.Sin(th)
								w2 := x1*math.Sin(th) + x2*math.Cos(th)
								mag := math.Abs(x1) + math.Abs(x2)
								bound := (pos*math.Ldexp(1, -22)+math.Ldexp(1, -21))*mag + u*max(math.Abs(w1), math.Abs(w2))
								if math.Abs(float64(got[o+i1])-w1) > bound || math.Abs(float64(got[o+i2])-w2) > bound {
									t.Fatalf("got (%v, %v), want (%v, %v) ± %g (b %d h %d t %d pair %d)", got[o+i1], got[o+i2], w1, w2, bound, bi, hh, tk, i)
								}
							}
							// Features past Dims pass through unchanged.
							expectSame(t, got[o+p.Dims:o+d], x[o+p.Dims:o+d], "pass-through features")
						}
					}
				}
			})
		}
	}
}

// TestRoPEOffsets: per-row offsets equal running each batch row alone with
// its own scalar offset (negative offsets included, as left padding makes).
func TestRoPEOffsets(t *testing.T) {
	const b, h, l, d = 3, 2, 5, 32
	p := RoPEParams{Dims: 32, Base: 500000, Scale: 1}
	offsets := []int{0, -3, 41}
	x := randVec(newRand(9), b*h*l*d, 1, Identity)
	all := make([]float32, len(x))
	RoPE(all, x, b, h, l, d, p, offsets, Identity)
	for bi, off := range offsets {
		row := x[bi*h*l*d : (bi+1)*h*l*d]
		one := make([]float32, len(row))
		RoPE(one, row, 1, h, l, d, p, []int{off}, Identity)
		expectSame(t, all[bi*h*l*d:(bi+1)*h*l*d], one, fmt.Sprintf("batch row %d (offset %d)", bi, off))
	}
}

func TestRoPEFastVsRef(t *testing.T) {
	for _, dt := range testDTypes {
		for _, trad := range []bool{false, true} {
			for _, freqs := range []bool{false, true} {
				const b, h, l, d = 2, 3, 7, 40
				t.Run(fmt.Sprintf("rope/%s/trad=%v/freqs=%v/%s", dt.name, trad, freqs, dims(b, h, l, d)), func(t *testing.T) {
					p := RoPEParams{Dims: 36, Traditional: trad, Base: 10000, Scale: 1}
					if freqs {
						for i := range 18 {
							p.Freqs = append(p.Freqs, float32(math.Pow(10000, float64(2*i)/36)*(1+float64(i%3))))
						}
					}
					x := randVec(newRand(4), b*h*l*d, 1, dt.round)
					x0 := slices.Clone(x)
					offsets := []int{3, 11}
					want := make([]float32, len(x))
					RoPERef(want, x, b, h, l, d, p, offsets, dt.round)
					got, whole := guarded(len(x))
					withThreads(3, func() { RoPE(got, x, b, h, l, d, p, offsets, dt.round) })
					expectSame(t, got, want, "fast vs ref")
					checkGuards(t, whole, "dst")
					unchanged(t, x, x0, "x")
					for _, v := range got {
						if v != dt.round(v) {
							t.Fatalf("output %v not rounded to %s", v, dt.name)
						}
					}
					// In place (dst aliases x) gives the same result.
					in := slices.Clone(x)
					RoPE(in, in, b, h, l, d, p, offsets, dt.round)
					expectSame(t, in, want, "in place")
				})
			}
		}
	}
}

// TestRoPEMemo: RoPE keeps its last cos/sin table; a sequence of calls that
// changes one parameter at a time (including Freqs changed in place in the
// caller's slice) must each give what RoPERef gives.
func TestRoPEMemo(t *testing.T) {
	const b, h, l, d = 1, 2, 3, 8
	freqs := []float32{1, 3, 9}
	base := RoPEParams{Dims: 6, Base: 10000, Scale: 1}
	steps := []struct {
		name string
		p    func() RoPEParams
		off  int
		l    int
	}{
		{"first", func() RoPEParams { return base }, 5, l},
		{"same", func() RoPEParams { return base }, 5, l},
		{"offset", func() RoPEParams { return base }, 6, l},
		{"length", func() RoPEParams { return base }, 6, 1},
		{"base", func() RoPEParams { q := base; q.Base = 500; return q }, 6, 1},
		{"scale", func() RoPEParams { q := base; q.Scale = 0.25; return q }, 6, 1},
		{"dims", func() RoPEParams { q := base; q.Dims = 4; return q }, 6, 1},
		{"freqs", func() RoPEParams { q := base; q.Freqs = freqs; return q }, 6, 1},
		{"freqs-changed-in-place", func() RoPEParams { freqs[1] = 4; q := base; q.Freqs = freqs; return q }, 6, 1},
		{"back", func() RoPEParams { return base }, 5, l},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			p := st.p()
			x := randVec(newRand(7), b*h*st.l*d, 1, Identity)
			got, want := make([]float32, len(x)), make([]float32, len(x))
			RoPE(got, x, b, h, st.l, d, p, []int{st.off}, Identity)
			RoPERef(want, x, b, h, st.l, d, p, []int{st.off}, Identity)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("got %v, want %v (index %d)", got[i], want[i], i)
				}
			}
		})
	}
}

// TestRoPEMemoRows: RoPE keeps several tables (a batch's rows sit at
// different offsets); rows at offsets seen before, after another base, and
// after long tables pushed the older ones out of the memo, must each give
// what RoPERef gives; and decode at ever new positions keeps the memo
// within its bounds.
func TestRoPEMemoRows(t *testing.T) {
	const h, d = 2, 8
	base := RoPEParams{Dims: 6, Base: 10000, Scale: 1}
	other := base
	other.Base = 700
	steps := []struct {
		name    string
		p       RoPEParams
		offsets []int
		l       int
	}{
		{"rows", base, []int{4, 11, 4, 30}, 1},
		{"rows-again", base, []int{30, 4, 11, 4}, 1},
		{"other-base", other, []int{4, 11}, 1},
		{"first-base-again", base, []int{11, 30}, 1},
		{"long", base, []int{0}, 200000},
		{"long-other", other, []int{1}, 200000},
		{"after-eviction", base, []int{4, 11, 30}, 1},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			b := len(st.offsets)
			x := randVec(newRand(5), b*h*st.l*d, 1, Identity)
			got, want := make([]float32, len(x)), make([]float32, len(x))
			RoPE(got, x, b, h, st.l, d, st.p, st.offsets, Identity)
			RoPERef(want, x, b, h, st.l, d, st.p, st.offsets, Identity)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("got %v, want %v (index %d)", got[i], want[i], i)
				}
			}
		})
	}
	for off := range 2 * ropeMemoTables { // decode: a new position every step
		x := randVec(newRand(6), h*d, 1, Identity)
		RoPE(make([]float32, len(x)), x, 1, h, 1, d, base, []int{100 + off}, Identity)
	}
	if n := len(ropeTables.tables); n > ropeMemoTables || ropeTables.floats > ropeMemoFloats && n > 1 {
		t.Errorf("memo keeps %d tables of %d values, want at most %d tables and %d values (or one table)", n, ropeTables.floats, ropeMemoTables, ropeMemoFloats)
	}
}
