package kernel

import (
	"math"
	"slices"
	"sync"
)

// RoPEParams parameterise rotary position embedding (mx.fast.rope).
type RoPEParams struct {
	Dims        int     // leading features rotated (even, <= d); the rest pass through
	Traditional bool    // rotate pairs (2i, 2i+1) instead of (i, i+Dims/2)
	Base        float32 // inv_freq_i = Base^(-2i/Dims); ignored when Freqs is set
	Scale       float32 // positions are multiplied by Scale
	Freqs       []float32
	// Freqs is nil or has Dims/2 entries: inv_freq_i = 1/Freqs[i].
}

// invFreqs returns the Dims/2 inverse frequencies as MLX's Metal rope kernel
// computes them (mlx/backend/metal/kernels/rope.metal and
// mlx/backend/metal/rope.cpp): exp2(-(i/(Dims/2))·log2(Base)) with
// log2(Base) taken in float32 on the host, or 1/Freqs[i]; all float32.
func invFreqs(p RoPEParams) []float32 {
	half := p.Dims / 2
	inv := make([]float32, half)
	if p.Freqs != nil {
		for i := range inv {
			inv[i] = 1 / p.Freqs[i]
		}
		return inv
	}
	lb := float32(math.Log2(float64(p.Base)))
	for i := range inv {
		d := float32(i) / float32(half)
		inv[i] = float32(math.Exp2(float64(-d * lb)))
	}
	return inv
}

// ropeTable is the cos and sin of every pair at l consecutive positions
// from off: cos[t·Dims/2 + i] is pair i at position off + t.
type ropeTable struct {
	p       RoPEParams
	off, l  int
	cos, sn []float32
}

// ropeMemo keeps the tables RoPE computed last, newest last, up to
// ropeMemoTables of them and ropeMemoFloats cos and sin values together
// (the newest is always kept), so that decode, whose positions move on
// every step, holds a bounded number of tables however long it runs. A
// decode step rotates the queries and keys of every layer at the same
// positions, one per row of a batch (rows sit at different offsets), so
// all but the first layer's calls find their tables here (the same values:
// it is what they would compute). Keeping only the last table, a server's
// eight rows at eight offsets recomputed a table at every call, serial work
// of about 1.6% of the CPU time under 8 clients (SmolLM2, Zen 3).
type ropeMemo struct {
	mu     sync.Mutex
	tables []*ropeTable
	floats int // len(cos) + len(sn) over tables
}

// ropeMemoTables and ropeMemoFloats bound the tables ropeMemo keeps (a
// batch of up to 64 rows finds every row's table) and their values (4 MiB).
const (
	ropeMemoTables = 64
	ropeMemoFloats = 1 << 20
)

var ropeTables ropeMemo

// find returns the kept table for (p, off, l), or nil.
func (m *ropeMemo) find(p RoPEParams, off, l int) *ropeTable {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.tables) - 1; i >= 0; i-- {
		if t := m.tables[i]; t.off == off && t.l == l && sameRoPE(t.p, p) {
			return t
		}
	}
	return nil
}

// keep adds t as the newest table, dropping the oldest ones beyond
// ropeMemoTables or ropeMemoFloats.
func (m *ropeMemo) keep(t *ropeTable) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tables = append(m.tables, t)
	m.floats += len(t.cos) + len(t.sn)
	for len(m.tables) > 1 && (len(m.tables) > ropeMemoTables || m.floats > ropeMemoFloats) {
		m.floats -= len(m.tables[0].cos) + len(m.tables[0].sn)
		m.tables[0] = nil
		m.tables = m.tables[1:]
	}
}

// get returns the table for (p, off, l), computing it (its positions split
// across workers) unless it is kept. Tables are never changed once made,
// so a caller may read one after the memo dropped it.
func (m *ropeMemo) get(p RoPEParams, off, l int) (cos, sin []float32) {
	if t := m.find(p, off, l); t != nil {
		return t.cos, t.sn
	}
	inv := invFreqs(p)
	half := len(inv)
	t := &ropeTable{p: p, off: off, l: l, cos: make([]float32, l*half), sn: make([]float32, l*half)}
	t.p.Freqs = slices.Clone(p.Freqs)
	parallelFor(l, max(1, 4096/half), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for j, f := range inv {
				t.cos[i*half+j], t.sn[i*half+j] = ropeAngle(p.Scale, i+off, f)
			}
		}
	})
	m.keep(t)
	return t.cos, t.sn
}

// sameRoPE reports whether a and b give the same angles (Freqs compared by
// value).
func sameRoPE(a, b RoPEParams) bool {
	return a.Dims == b.Dims && a.Base == b.Base && a.Scale == b.Scale &&
		(a.Freqs == nil) == (b.Freqs == nil) && slices.Equal(a.Freqs, b.Freqs)
}

// ropeAngle returns cos θ and sin θ for θ = (Scale·pos)·inv in float32.
func ropeAngle(scale float32, pos int, inv float32) (c, s float32) {
	theta := float32(scale*float32(pos)) * inv
	return float32(math.Cos(float64(theta))), float32(math.Sin(float64(theta)))
}

// ropeRow rotates one row of d features whose token sits at position pos,
// with cos/sin given per pair. The rotated values are written in float32
// and then rounded together (roundSlice with kind = roundKind(round), or 0
// for one call of round per value): the same bits, each value rounded
// once. Every pair is read before it is written, so dst may be x.
func ropeRow(dst, x []float32, d int, p RoPEParams, cs, sn []float32, round Rounder, kind byte) {
	half := p.Dims / 2
	i0 := 0
	if simdRoPE != nil && !p.Traditional {
		i0 = simdRoPE(dst, x, cs, sn, half)
	}
	for i := i0; i < half; i++ {
		i1, i2 := i, i+half
		if p.Traditional {
			i1, i2 = 2*i, 2*i+1
		}
		x1, x2, c, s := x[i1], x[i2], cs[i], sn[i]
		dst[i1] = float32(x1*c) - float32(x2*s)
		dst[i2] = float32(x1*s) + float32(x2*c)
	}
	roundSlice(dst[:p.Dims], round, kind)
	copy(dst[p.Dims:d], x[p.Dims:d])
}

// simdRoPE, when the CPU has AVX-512 (vec_amd64.go) or AVX2
// (vec_avx2_amd64.go), rotates the first pairs of a row in halves (not
// Traditional) as ropeRow's loop does, bit for bit, and returns how many;
// nil otherwise.
var simdRoPE func(dst, x, cs, sn []float32, half int) int

func checkRoPE(dst, x []float32, b, h, l, d int, p RoPEParams, offsets []int) {
	check(b >= 0 && h >= 0 && l >= 0 && d > 0, "RoPE", "sizes b=%d h=%d l=%d d=%d", b, h, l, d)
	check(p.Dims > 0 && p.Dims%2 == 0 && p.Dims <= d, "RoPE", "dims %d, want even, positive and <= %d", p.Dims, d)
	check(p.Freqs == nil || len(p.Freqs) == p.Dims/2, "RoPE", "%d freqs, want %d", len(p.Freqs), p.Dims/2)
	check(len(offsets) == 1 || len(offsets) == b, "RoPE", "%d offsets, want 1 or %d", len(offsets), b)
	need("RoPE", "x", len(x), b*h*l*d)
	need("RoPE", "dst", len(dst), b*h*l*d)
}

func rowOffset(offsets []int, bi int) int {
	if len(offsets) == 1 {
		return offsets[0]
	}
	return offsets[bi]
}

// RoPERef is the reference of [RoPE]: one goroutine, angles recomputed per row.
func RoPERef(dst, x []float32, b, h, l, d int, p RoPEParams, offsets []int, round Rounder) {
	checkRoPE(dst, x, b, h, l, d, p, offsets)
	round = roundOr(round)
	inv := invFreqs(p)
	cs, sn := make([]float32, len(inv)), make([]float32, len(inv))
	for bi := range b {
		for hi := range h {
			for t := range l {
				for i, f := range inv {
					cs[i], sn[i] = ropeAngle(p.Scale, t+rowOffset(offsets, bi), f)
				}
				o := ((bi*h+hi)*l + t) * d
				ropeRow(dst[o:o+d], x[o:o+d], d, p, cs, sn, round, 0)
			}
		}
	}
}

// RoPE is mx.fast.rope on x [b, h, l, d] with the numerics of MLX's Metal
// kernel (mlx/backend/metal/kernels/rope.metal): token t of batch row bi
// sits at position pos = t + offset (offsets has one entry, or one per batch row);
// θ_i = (Scale·pos)·inv_freq_i in float32 (see invFreqs), cos and sin
// correctly rounded to float32, and for each pair (x1, x2), (i, i+Dims/2) or
// (2i, 2i+1) when Traditional:
//
//	x1' = round(x1·cosθ − x2·sinθ),  x2' = round(x1·sinθ + x2·cosθ)
//
// each product and sum in float32, rounded once to the dtype. Features past
// Dims are copied. (MLX's CPU fallback instead rounds cos/sin to the dtype
// and rounds after every op; the two differ by about one ulp.) Scratch: the
// cos/sin table of one batch row, 2·l·Dims/2 floats, kept for the next call
// (see ropeMemo); rows of l·d are split across workers.
func RoPE(dst, x []float32, b, h, l, d int, p RoPEParams, offsets []int, round Rounder) {
	checkRoPE(dst, x, b, h, l, d, p, offsets)
	round = roundOr(round)
	half := p.Dims / 2
	kind := roundKind(round)
	cs, sn := make([][]float32, b), make([][]float32, b)
	for bi := range b {
		cs[bi], sn[bi] = ropeTables.get(p, rowOffset(offsets, bi), l)
	}
	parallelFor(b*h*l, max(1, 1024/d), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			bi, t := i/(h*l), i%l
			o := i * d
			ropeRow(dst[o:o+d], x[o:o+d], d, p, cs[bi][t*half:(t+1)*half], sn[bi][t*half:(t+1)*half], round, kind)
		}
	})
}
