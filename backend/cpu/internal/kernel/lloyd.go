package kernel

import (
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

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

// keyArgs are the arguments of keyRows8 (field offsets are the
// assembly's: keep the order and the types).
type keyArgs struct {
	dst              *float32 // row r at dst + r·dstride floats
	dstride          int
	codes            *int8 // row r's codes at codes + r·cstride bytes
	cstride          uintptr
	scales, zeros    *uint16 // row r's float16 scales and zero points (one per 32 codes)
	sstride, zstride uintptr // in bytes
	rows, n          int     // n a multiple of 32
	bf16             int     // 1: round to bfloat16
}

// DecodeKeyRows8 writes rows rows of n values decoded from signed 8-bit
// codes with a float16 scale s and zero point z per group of 32
// (TurboQuant's 8-bit keys) to dst, row r at r·dstride: float32(c + z)·s,
// each step rounded to float32, then rounded to dt (float32 or bfloat16);
// row r's codes start at byte r·cstride of codes, its scales and zero
// points at element r·sstride and r·zstride. It reports false, writing
// nothing, for what its AVX-512 kernel does not take (another dt, n not a
// multiple of 32, no AVX-512); the caller then decodes in Go. The result is
// the bits of keyRows8Go.
func DecodeKeyRows8(dst []float32, dstride int, codes []byte, cstride int, scales []uint16, sstride int, zeros []uint16, zstride int, rows, n int, dt tensor.DType) bool {
	if !lloydAsm || n%32 != 0 || n <= 0 || rows <= 0 || (dt != tensor.F32 && dt != tensor.BF16) {
		return false
	}
	need("DecodeKeyRows8", "dst", len(dst), (rows-1)*dstride+n)
	need("DecodeKeyRows8", "codes", len(codes), (rows-1)*cstride+n)
	need("DecodeKeyRows8", "scales", len(scales), (rows-1)*sstride+n/32)
	need("DecodeKeyRows8", "zeros", len(zeros), (rows-1)*zstride+n/32)
	a := keyArgs{
		dst: &dst[0], dstride: dstride, codes: (*int8)(unsafe.Pointer(&codes[0])), cstride: uintptr(cstride),
		scales: &scales[0], zeros: &zeros[0], sstride: uintptr(2 * sstride), zstride: uintptr(2 * zstride), rows: rows, n: n,
	}
	if dt == tensor.BF16 {
		a.bf16 = 1
	}
	keyRows8(&a)
	return true
}

// keyRows8Go is the portable twin of keyRows8 (DecodeKeyRows8's
// definition, one value at a time).
func keyRows8Go(dst []float32, dstride int, codes []byte, cstride int, scales []uint16, sstride int, zeros []uint16, zstride int, rows, n int, dt tensor.DType) {
	for r := range rows {
		for t := range n {
			s, z := tensor.F16ToFloat32(scales[r*sstride+t/32]), tensor.F16ToFloat32(zeros[r*zstride+t/32])
			x := float32(float32(int8(codes[r*cstride+t]))+z) * s
			if dt == tensor.BF16 {
				x = tensor.RoundBF16(x)
			}
			dst[r*dstride+t] = x
		}
	}
}
