package cpu

import (
	"math"
	"math/bits"
	"unsafe"
)

// The buffer pool: storage of released arrays (and scratch of ops) is kept
// for reuse by later ops instead of being left to the garbage collector, so
// a decode step that repeats the shapes of the previous one allocates no
// new storage. Buffers are kept in size classes m·2^e (m in 8..15), found
// by the class at or above a request and filed under the class at or below
// their capacity, so a reused buffer wastes at most 1/8 of its size. The
// pool holds at most poolLimit bytes; beyond that, released storage is left
// to the garbage collector. Backend.ClearCache empties it. The pool belongs
// to one Backend and, like it, is not safe for concurrent use.

// poolLimit caps the bytes the pool keeps.
const poolLimit = 256 << 20

// poison, set by tests, fills every buffer handed out with a NaN pattern
// (0xFF bytes), so an op that leaves part of its output unwritten fails.
var poison bool

type pool struct {
	f32   map[int][][]float32 // free float32 slices by capacity class
	raw   map[int][][]byte    // free 8-byte-aligned byte slices by class
	bufs  []*buffer           // free buffer headers
	bytes int64               // bytes held
}

func newPool() *pool {
	return &pool{f32: map[int][][]float32{}, raw: map[int][][]byte{}}
}

// ceilClass returns the smallest class capacity >= n.
func ceilClass(n int) int {
	if n <= 16 {
		return n
	}
	e := bits.Len(uint(n-1)) - 4 // (n-1)>>e is in 8..15
	return ((n-1)>>e + 1) << e
}

// floorClass returns the largest class capacity <= n.
func floorClass(n int) int {
	if n <= 16 {
		return n
	}
	e := bits.Len(uint(n)) - 4 // n>>e is in 8..15
	return n >> e << e
}

// getF32 returns n float32s: pooled (contents undefined) or new (zero).
func (p *pool) getF32(n int) []float32 {
	c := ceilClass(n)
	if l := p.f32[c]; len(l) > 0 {
		v := l[len(l)-1]
		l[len(l)-1] = nil
		p.f32[c] = l[:len(l)-1]
		p.bytes -= int64(4 * cap(v))
		v = v[:n]
		if poison {
			fillNaN(v)
		}
		return v
	}
	v := make([]float32, n, c)
	if poison {
		fillNaN(v)
	}
	return v
}

// putF32 keeps v for reuse (when it fits under the limit).
func (p *pool) putF32(v []float32) {
	c := floorClass(cap(v))
	if c == 0 || p.bytes+int64(4*c) > poolLimit {
		return
	}
	p.f32[c] = append(p.f32[c], v[:0:c])
	p.bytes += int64(4 * c)
}

// getRaw returns n bytes, 8-byte aligned: zeroed when zero is set,
// otherwise with undefined contents.
func (p *pool) getRaw(n int, zero bool) []byte {
	c := ceilClass(n)
	if l := p.raw[c]; len(l) > 0 {
		v := l[len(l)-1]
		l[len(l)-1] = nil
		p.raw[c] = l[:len(l)-1]
		p.bytes -= int64(cap(v))
		v = v[:n]
		switch {
		case zero:
			clear(v)
		case poison:
			fillFF(v)
		}
		return v
	}
	if c == 0 {
		return []byte{}
	}
	w := make([]uint64, (c+7)/8)
	v := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), c)[:n]
	if poison && !zero {
		fillFF(v)
	}
	return v
}

// putRaw keeps v for reuse; v must be 8-byte aligned.
func (p *pool) putRaw(v []byte) {
	c := floorClass(cap(v))
	if c == 0 || p.bytes+int64(c) > poolLimit {
		return
	}
	p.raw[c] = append(p.raw[c], v[:0:c])
	p.bytes += int64(c)
}

// clear drops every pooled slice.
func (p *pool) clear() {
	clear(p.f32)
	clear(p.raw)
	p.bytes = 0
}

var nanPoison = math.Float32frombits(0xFFFFFFFF)

func fillNaN(v []float32) {
	for i := range v {
		v[i] = nanPoison
	}
}

func fillFF(v []byte) {
	for i := range v {
		v[i] = 0xFF
	}
}
