//go:build !amd64

package kernel

import "unsafe"

// installAsm: no assembly kernels on this platform.
func installAsm() {}

// asmDot is never called: installAsm leaves asmF32 and asmQ8 false.
func asmDot(a *qArgs, bits int, q8 bool) { panic("kernel: no assembly kernels on this platform") }

// q8gemm, q8gemmDot, q8gemvDot, q8gemv, q8Quant and q8Transpose are never called: asmQ8 stays false.
func q8gemm(a *q8gArgs) { panic("kernel: no assembly kernels on this platform") }

func q8gemmDot(a *q8gArgs) { panic("kernel: no assembly kernels on this platform") }

func q8gemvDot(a *q8gArgs) { panic("kernel: no assembly kernels on this platform") }
func q8gemv(a *q8gArgs)    { panic("kernel: no assembly kernels on this platform") }

func q8Quant(x *float32, xq *int8, d *float32, nb int, xqStep, dStep uintptr, perm bool) {
	panic("kernel: no assembly kernels on this platform")
}

func q8Transpose(dst, src unsafe.Pointer, stride uintptr, nchunk int, nib bool) {
	panic("kernel: no assembly kernels on this platform")
}

func f32gemmB4(a *f32gArgs) { panic("kernel: no assembly kernels on this platform") }

func f32gemmB8(a *f32gArgs) { panic("kernel: no assembly kernels on this platform") }

func gsum16(dst, x *float32, gs, nset int) { panic("kernel: no assembly kernels on this platform") }

func gsum8(dst, x *float32, gs, nset int) { panic("kernel: no assembly kernels on this platform") }

func permF32Asm(dst, src *float32, nblk int, dstStep uintptr, bits int) {
	panic("kernel: no assembly kernels on this platform")
}

func permQ8Asm(dst, src *int8, dxl, dx *float32, nblk, bits int) {
	panic("kernel: no assembly kernels on this platform")
}

// amxDenseBF16 is never called: asmAMXBF16 stays false.
func amxDenseBF16(a *amxDenseArgs) { panic("kernel: no assembly kernels on this platform") }
