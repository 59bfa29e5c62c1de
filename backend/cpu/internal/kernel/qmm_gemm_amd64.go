//go:build amd64

package kernel

import "unsafe"

// The int8 GEMM kernels of qmm_gemm_amd64.s (AVX-512 F/BW/DQ/VL and VNNI),
// used when asmQ8 is set; qmm_gemm.go describes the layouts.

//go:noescape
func q8gemm(a *q8gArgs)

//go:noescape
func q8Quant(x *float32, xq *int8, d *float32, nb int, xqStep, dStep uintptr, perm bool)

//go:noescape
func q8Transpose(dst, src unsafe.Pointer, stride uintptr, nchunk int, nib bool)

//go:noescape
func f32gemmB4(a *f32gArgs)

//go:noescape
func f32gemmB8(a *f32gArgs)

//go:noescape
func gsum16(dst, x *float32, gs, nset int)

//go:noescape
func permF32Asm(dst, src *float32, nblk int, dstStep uintptr, bits int)

//go:noescape
func permQ8Asm(dst, src *int8, dxl, dx *float32, nblk, bits int)
