package kernel

import (
	"math"
	"unsafe"
)

// The float32 SDPA over 8-bit quantized keys and values ([QuantKV] with
// Bits 8) on AVX-512 (sdpa_q8_amd64.s): two kernels that read the codes in
// place instead of expanding each block of 32 rows to float32 scratch.
//
// Values (any precision): sdpaQPV8 accumulates 8 query rows (the query
// heads of one KV head under GQA 8, MiniCPM5's decode) against each value
// row read once: per key j it expands the 32 codes of a tile of dims to
// v = float32(s·c) + b, QuantKV's definition, and adds p_r,j·v to each
// row's accumulators with a fused multiply-add, in order of j, after the
// rescale acc·f: the instructions sdpaPV4 runs on the expanded rows, so
// the result is the same bits as the path that expands (qpv8Go is its
// portable twin, and TestSDPAQuantKV holds the whole path to SDPAKV on the
// float32 values bit for bit).
//
// Keys (AccQ8, the "fast" precision, on CPUs with AVX512-VNNI): each
// query row's scaled values qs (scale·q) are quantized per group g of the
// keys' group size, as llama.cpp quantizes a query row for its q8_0 cache:
//
//	qd_g = max_t |qs_t| / 127,  c_t = round_even(qs_t · (127 / max_t |qs_t|)) in [−127, 127]
//	S_g  = Σ_t qs_t (float32, in order of t)
//
// and the score of key j (codes k_jt, scale s_jg, bias b_jg) is
//
//	I_g   = Σ_t k_jt·c_t                              (exact, int32: VPDPBUSD)
//	score = Σ_g [ float32(float32(float32(I_g)·qd_g)·s_jg) + float32(b_jg·S_g) ]
//
// summed over g in order, each product and sum rounded to float32. The
// exact score is Σ_g s_jg·Σ_t k_jt·qs_t + b_jg·S_g; the query's rounding
// moves each qs_t by at most qd_g/2, so
//
//	|score − exact| ≤ Σ_g |s_jg|·(qd_g/2)·Σ_t k_jt  + rounding
//
// where the rounding (three products and two sums per group, a relative
// 2^-24 each, and the reference's own order) is below 2^-20 times the sum
// of the magnitudes of the terms. TestSDPAQ8Bound checks the outputs
// against the float32 reference on the expanded values within the bound
// this gives (see q8OutputBound), and TestSDPAQ8ScoresTwin the assembly
// against q8ScoresGo bit for bit. The codes of a block of 32 keys are
// transposed once (sdpaQ8KT) and read by every query row of the item, so
// GQA's 8 query heads share each key block. On SmolLM2-135M (mlxgo
// kvquality, fast precision, 256 steps) this moved the 8-bit cache's mean
// KL against the full cache from 0.0079 to 0.014, top-1 agreement 98.0%
// both (the fast precision's int8 activations already cost more than
// that: in the reference precision the mean KL is 6e-5). Query groups of
// 32 under keys of group 64 (llama.cpp's q8_0 block) gave 0.013 for 15-25%
// more time per block in the scores, so the query group is the keys'.
//
// Rows whose scaled query holds an infinity or a NaN take the float32 path
// (the quantization has no scale for them).

// Q8KeySource is implemented by a [RowSource] of keys stored as signed
// 8-bit codes c, one byte each, with a scale s and a zero point z per group
// (TurboQuant's 8-bit keys: the value of c is float32(c + z)·s). In the
// fast precision (AccQ8) SDPAKV then scores the codes in integer
// arithmetic as it does a QuantKV's, with s and float32(s·z) as the
// group's scale and bias (the key kernel below); the reference precision
// asks for decoded rows as from any RowSource.
type Q8KeySource interface {
	RowSource
	// Q8Keys returns the codes (row (bi, h, j) from byte bi·bst + h·hst +
	// j·rst of codes), the scales and zero points ([b, hk, s, n/groupSize]
	// as a QuantKV's scales) and the group size (32, 64 or 128).
	Q8Keys() (codes []byte, bst, hst, rst int, scales, zeros KV, groupSize int)
}

// q8Keys is the 8-bit key storage the key kernel reads: a QuantKV's
// unsigned codes (value float32(s·c) + b) or a Q8KeySource's signed ones
// (value float32(c + z)·s, bias s·z).
type q8Keys struct {
	codes         []byte
	bst, hst, rst int // bytes
	scales, bias  *KV // bias holds the zero points when signed
	gs            int
	signed        bool
}

// row returns the byte offset of row (bi, h, j).
func (k *q8Keys) row(bi, h, j int) int { return bi*k.bst + h*k.hst + j*k.rst }

// sdpaQ8KeysOf returns the 8-bit key storage of k for a job of head size
// d in precision acc on kernel set vk, or nil when the key kernel does not
// apply (it needs AccQ8 on a CPU with AVX512-VNNI, d a multiple of 64 and
// 8-bit keys).
func sdpaQ8KeysOf(k *KV, d int, acc Acc, vk int) *q8Keys {
	if acc != AccQ8 || !asmQ8 || vk != sdpa512 || d%64 != 0 {
		return nil
	}
	if q := k.Q; q != nil && q.Bits == 8 && len(q.W) > 0 {
		codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.W[0])), len(q.W)*4)
		return &q8Keys{codes: codes, bst: 4 * q.BStride, hst: 4 * q.HStride, rst: 4 * q.RowStride, scales: &q.Scales, bias: &q.Biases, gs: q.GroupSize}
	}
	if src, ok := k.Rows.(Q8KeySource); ok {
		codes, bst, hst, rst, sc, z, gs := src.Q8Keys()
		if (gs != 32 && gs != 64 && gs != 128) || d%gs != 0 {
			return nil
		}
		return &q8Keys{codes: codes, bst: bst, hst: hst, rst: rst, scales: &sc, bias: &z, gs: gs, signed: true}
	}
	return nil
}

// q8ScoreArgs are the arguments of sdpaQ8Scores (field offsets are the
// assembly's: keep the order and the types).
type q8ScoreArgs struct {
	sc     *float32 // scores out: row r, key j at sc[r·32 + j]
	q8     *int32   // query codes: row group rg, dword t4, row k at q8[(rg·d/4 + t4)·4 + k]
	qd, qs *float32 // query scales and sums: row group rg, group g, row k at [(rg·gpr + g)·4 + k]
	qi     *int32   // initial integer sums, laid out as qd
	kt     *int32   // sdpaQ8KT of keys 0-15, then of keys 16-31 (d/4·16 dwords each)
	ks, kb *float32 // key scales and biases: group g, key j at [g·32 + j]
	rows   int      // a positive multiple of 4
	d      int      // a multiple of 64
	gpr    int      // groups per key row
	gs4    int      // dwords per group (group size / 4)
}

// qpvArgs are the arguments of sdpaQPV8 (field offsets are the
// assembly's: keep the order and the types).
type qpvArgs struct {
	acc     *float32       // 8 rows of dv accumulators, row r at acc[r·dv]
	p       *float32       // weights: row r, key j at p[r·32 + j]
	f       *float32       // the 8 rows' rescale factors
	v       unsafe.Pointer // 8-bit codes of key 0; key j at v + j·vstride bytes
	vstride uintptr
	vs, vb  *float32 // scales and biases: key j, group g at [j·gpr + g]
	n       int      // keys
	dv      int      // a multiple of 32
	gpr     int
	gsShift int // log2 of the group size (>= 5)
}

// sdpaQ8Scratch is a worker's scratch of the 8-bit kernels.
type sdpaQ8Scratch struct {
	q8       []int32   // the item's query codes (q8ScoreArgs layout)
	qd, qsum []float32 // its query scales and sums
	qi       []int32   // its initial integer sums
	qok      bool      // every scaled query value of the item is finite
	kt       []int32   // a block's transposed key codes
	kc       []byte    // a partial block's key codes, zero-padded to 32 rows
	ksr, kbr []float32 // a block's key scales and biases, key-major
	ks, kb   []float32 // and group-major
	vs, vb   []float32 // a block's value scales and biases, key-major
}

// grow sizes the scratch for job j.
func (s *sdpaQ8Scratch) grow(j *sdpaJob) {
	if j.qk8 != nil {
		gpr := j.d / j.qk8.gs
		s.q8 = growI32(s.q8, j.rpad*j.d/4)
		s.qd = sdpaGrow(s.qd, j.rpad*gpr)
		s.qsum = sdpaGrow(s.qsum, j.rpad*gpr)
		s.qi = growI32(s.qi, j.rpad*gpr)
		s.kt = growI32(s.kt, sdpaBK*j.d/4)
		if cap(s.kc) < sdpaBK*j.d {
			s.kc = make([]byte, sdpaBK*j.d)
		}
		s.kc = s.kc[:sdpaBK*j.d]
		s.ksr = sdpaGrow(s.ksr, sdpaBK*gpr)
		s.kbr = sdpaGrow(s.kbr, sdpaBK*gpr)
		s.ks = sdpaGrow(s.ks, sdpaBK*gpr)
		s.kb = sdpaGrow(s.kb, sdpaBK*gpr)
	}
	if j.qpv8 {
		gpr := j.dv / j.v.Q.GroupSize
		s.vs = sdpaGrow(s.vs, sdpaBK*gpr)
		s.vb = sdpaGrow(s.vb, sdpaBK*gpr)
	}
}

func growI32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// sdpaQ8Values reports whether a job reading values v with head size dv
// takes sdpaQPV8 (any precision: the same bits as the expanding path).
func sdpaQ8Values(v *KV, dv int, vk int) bool {
	return vk == sdpa512 && v.Q != nil && v.Q.Bits == 8 && dv%32 == 0
}

// loadScales writes the gpr scales (or biases) of each of n rows of s from
// position j0 of (bi, h) to dst, row after row, as float32.
func loadScales(dst []float32, s *KV, bi, h, j0, n, gpr int) {
	if s.RowStride == gpr {
		s.Vec.load(dst[:n*gpr], s.row(bi, h, j0))
		return
	}
	for x := range n {
		s.Vec.load(dst[x*gpr:(x+1)*gpr], s.row(bi, h, j0+x))
	}
}

// quantQ quantizes the scaled query rows qs (rpad rows of d values) for
// the 8-bit key kernel into w's q8, qd, qsum and qi (see the top of this
// file); qok reports whether every value was finite. The rounding to the
// nearest integer, ties to even, is float32 arithmetic: |x| <= 127.5 <
// 2^22, so (x + 1.5·2^23) − 1.5·2^23 is x rounded to an integer, ties to
// even.
func (j *sdpaJob) quantQ(w *sdpaWork, qs []float32) {
	const magic = 1.5 * (1 << 23)
	s := &w.q8
	d, d4 := j.d, j.d/4
	gs := j.qk8.gs
	gpr := d / gs
	s.qok = true
	for r := range j.rpad {
		rg, k := r/4, r%4
		row := qs[r*d : (r+1)*d]
		for g := range gpr {
			grp := row[g*gs : (g+1)*gs]
			var amax, sum float32
			for _, x := range grp {
				amax = max(amax, math.Float32frombits(math.Float32bits(x)&0x7fffffff))
				sum += x
			}
			if amax > math.MaxFloat32 || amax != amax {
				s.qok = false
				return
			}
			x := (rg*gpr+g)*4 + k
			s.qsum[x] = sum
			s.qi[x] = 0
			var inv float32
			if amax > 0 {
				s.qd[x], inv = amax/127, 127/amax
			} else {
				s.qd[x] = 0
			}
			var csum int32
			dst := s.q8[(rg*d4+g*gs/4)*4+k:]
			for t4 := range gs / 4 {
				c4 := grp[t4*4 : t4*4+4 : t4*4+4]
				var word uint32
				for b, v := range c4 {
					f := float32(float32(v*inv)+magic) - magic
					c := int32(max(-127, min(127, f)))
					csum += c
					word |= uint32(uint8(int8(c))) << (8 * b)
				}
				dst[t4*4] = int32(word)
			}
			if j.qk8.signed {
				s.qi[x] = -128 * csum // the kernel reads signed codes c as c+128
			}
		}
	}
}

// q8Scores is scores for the 8-bit key kernel: rows [r0, rows) against
// keys j0..j0+n-1.
func (j *sdpaJob) q8Scores(w *sdpaWork, bi, kh, j0, n, r0, rows int) {
	s := &w.q8
	k, d := j.qk8, j.d
	gpr := d / k.gs
	src := unsafe.Pointer(&k.codes[k.row(bi, kh, j0)])
	stride := uintptr(k.rst)
	if n < sdpaBK {
		clear(s.kc)
		for x := range n {
			o := k.row(bi, kh, j0+x)
			copy(s.kc[x*d:(x+1)*d], k.codes[o:o+d])
		}
		src, stride = unsafe.Pointer(&s.kc[0]), uintptr(d)
	}
	xor := 0
	if k.signed {
		xor = 0x80808080
	}
	sdpaQ8KT(&s.kt[0], src, stride, d, xor)
	sdpaQ8KT(&s.kt[d/4*16], unsafe.Add(src, 16*stride), stride, d, xor)
	loadScales(s.ksr, k.scales, bi, kh, j0, n, gpr)
	loadScales(s.kbr, k.bias, bi, kh, j0, n, gpr)
	if k.signed { // zero points to biases s·z
		for i, z := range s.kbr[:n*gpr] {
			s.kbr[i] = z * s.ksr[i]
		}
	}
	sdpaQ8GT(&s.ks[0], &s.ksr[0], sdpaBK, gpr)
	sdpaQ8GT(&s.kb[0], &s.kbr[0], sdpaBK, gpr)
	ra := r0 &^ 3
	a := q8ScoreArgs{
		sc: &w.sc[ra*sdpaBK], q8: &s.q8[ra*d/4], qd: &s.qd[ra*gpr], qs: &s.qsum[ra*gpr], qi: &s.qi[ra*gpr],
		kt: &s.kt[0], ks: &s.ks[0], kb: &s.kb[0], rows: j.rpadRows(rows) - ra, d: d, gpr: gpr, gs4: k.gs / 4,
	}
	sdpaQ8Scores(&a)
}

// runQPV8 accumulates rows r..r+7 (each seeing all n keys, no holes) against
// the block's 8-bit values with sdpaQPV8.
func (j *sdpaJob) runQPV8(w *sdpaWork, st *sdpaState, bi, kh, j0, n, r int) {
	q := j.v.Q
	gpr := j.dv / q.GroupSize
	s := &w.q8
	loadScales(s.vs, &q.Scales, bi, kh, j0, n, gpr)
	loadScales(s.vb, &q.Biases, bi, kh, j0, n, gpr)
	shift := 5
	for 1<<shift < q.GroupSize {
		shift++
	}
	a := qpvArgs{
		acc: &st.acc[r*j.dv], p: &w.sc[r*sdpaBK], f: &st.f[r],
		v: unsafe.Pointer(&q.W[q.wrow(bi, kh, j0)]), vstride: uintptr(q.RowStride) * 4,
		vs: &s.vs[0], vb: &s.vb[0], n: n, dv: j.dv, gpr: gpr, gsShift: shift,
	}
	sdpaQPV8(&a)
}
