package kernel

import "github.com/mlxgo/mlxgo/tensor"

// lloydArgs are the arguments of lloydRows (field offsets are the
// assembly's: keep the order and the types).
type lloydArgs struct {
	dst     *float32 // row r at dst + r·dstride floats
	dstride int
	codes   *byte // row r's packed codes at codes + r·cstride bytes
	cstride uintptr
	scales  *uint16 // row r's float16 scales (one per 32 codes) at scales + r·sstride bytes
	sstride uintptr
	rows, n int      // n a multiple of 32
	bits    int      // 2, 3 or 4
	cent    *float32 // 16 centroids (the 2^bits used, then padding)
	idx     *byte    // VPERMB indices: lane i's two code bytes
	shift   *int32   // lane i's bit offset in them
	bf16    int      // 1: round to bfloat16
}

// lloydTables holds, per bit width 2 to 4, the byte indices and bit
// offsets that move code i of a chunk of 16 into dword lane i.
var lloydTables = func() (t [5]struct {
	idx   [64]byte
	shift [16]int32
}) {
	for bits := 2; bits <= 4; bits++ {
		for i := range 16 {
			o := bits * i
			t[bits].idx[4*i] = byte(o / 8)
			for k := 1; k < 4; k++ {
				t[bits].idx[4*i+k] = byte(o/8 + 1)
			}
			t[bits].shift[i] = int32(o % 8)
		}
	}
	return t
}()

// DecodeLloydRows writes rows rows of n values decoded from Lloyd-Max
// codes (TurboQuant's values, kept rotated) to dst, row r at r·dstride:
// value t of row r is centroids[c_t]·ρ_g, c_t the t-th bits-bit code of
// the row's little-endian bitstream (row r from byte r·cstride of codes)
// and ρ_g the float16 scale of its group of 32 (row r's from element
// r·sstride of scales), the product rounded to float32 and then to dt
// (float32 or bfloat16). It reports false, writing nothing, for what its
// AVX-512 kernel does not take (bits other than 2, 3 or 4, another dt, n
// not a multiple of 32, no AVX-512 VBMI); the caller then decodes in Go.
// The result is the bits of lloydRowsGo.
func DecodeLloydRows(dst []float32, dstride int, codes []byte, cstride int, scales []uint16, sstride int, rows, n, bits int, centroids []float32, dt tensor.DType) bool {
	if !lloydAsm || bits < 2 || bits > 4 || n%32 != 0 || n <= 0 || rows <= 0 || len(centroids) != 1<<bits || (dt != tensor.F32 && dt != tensor.BF16) {
		return false
	}
	need("DecodeLloydRows", "dst", len(dst), (rows-1)*dstride+n)
	need("DecodeLloydRows", "codes", len(codes), (rows-1)*cstride+n*bits/8)
	need("DecodeLloydRows", "scales", len(scales), (rows-1)*sstride+n/32)
	var cent [16]float32
	copy(cent[:], centroids)
	a := lloydArgs{
		dst: &dst[0], dstride: dstride, codes: &codes[0], cstride: uintptr(cstride), scales: &scales[0], sstride: uintptr(2 * sstride),
		rows: rows, n: n, bits: bits, cent: &cent[0], idx: &lloydTables[bits].idx[0], shift: &lloydTables[bits].shift[0],
	}
	if dt == tensor.BF16 {
		a.bf16 = 1
	}
	lloydRows(&a)
	return true
}

// lloydRowsGo is the portable twin of lloydRows (DecodeLloydRows's
// definition, one value at a time).
func lloydRowsGo(dst []float32, dstride int, codes []byte, cstride int, scales []uint16, sstride int, rows, n, bits int, centroids []float32, dt tensor.DType) {
	for r := range rows {
		row := codes[r*cstride:]
		for t := range n {
			bit := t * bits
			v := (uint32(row[bit/8]) | uint32(row[min(bit/8+1, len(row)-1)])<<8) >> (bit % 8) & (1<<bits - 1)
			x := centroids[v] * tensor.F16ToFloat32(scales[r*sstride+t/32])
			if dt == tensor.BF16 {
				x = tensor.RoundBF16(x)
			}
			dst[r*dstride+t] = x
		}
	}
}
