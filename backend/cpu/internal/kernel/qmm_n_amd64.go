package kernel

import "unsafe"

// qmmNPanelRows is the rows of x per accumulator block of qmmNPanel.
const qmmNPanelRows = 64

// qmmNAsm runs qmmN's float32 accumulation on the AVX2 reference kernels
// of the dense matmul (denseRef1..4: per lane and step a float32 multiply,
// then a float32 add), reporting false when they do not cover the CPU or
// the group size is not a multiple of sixteen.
func qmmNAsm(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder) bool {
	if !denseOn || !denseAVX || gs%16 != 0 {
		return false
	}
	gpr := n / gs
	parallelFor(gpr, max(1, 65536/max(1, gs*m*k)), func(lo, hi int) {
		qmmNPanel(dst, x, wq, scales, biases, m, n, k, gs, bits, round, lo, hi)
	})
	return true
}

// qmmNPanel runs groups lo..hi-1 of output columns: per group and block of
// up to qmmNPanelRows rows of x the accumulators start at +0; each chunk of
// denseKC values of k expands the group's weights, w = s·q + b rounded to
// float32 as qmmN[float32] computes them, into gs/16 panels of sixteen
// columns (panel[l][c] at 16·l + c), and denseRef1..4 add their terms in
// order, up to four rows of x at a time. Every output is qmmN[float32]'s
// in-order loop, so its bits.
func qmmNPanel(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder, lo, hi int) {
	wpr, wpg, gpr := WordsPerRow(n, bits), WordsPerRow(gs, bits), n/gs
	np := gs / 16
	panel := make([]float32, denseKC*gs)
	acc := make([]float32, qmmNPanelRows*gs)
	codes := make([]float32, gs)
	var a denseArgs
	a.astr = uintptr(4 * k)
	for g := lo; g < hi; g++ {
		c0 := g * gs
		for r0 := 0; r0 < m; r0 += qmmNPanelRows {
			rows := min(qmmNPanelRows, m-r0)
			clear(acc[:rows*gs])
			for l0 := 0; l0 < k; l0 += denseKC {
				kc := min(denseKC, k-l0)
				for l := range kc {
					kk := l0 + l
					decodeGroup(codes, wq[kk*wpr+g*wpg:], gs, bits)
					s, b := scales[kk*gpr+g], biases[kk*gpr+g]
					for p := range np {
						pr := panel[(p*denseKC+l)*16 : (p*denseKC+l)*16+16]
						for c, q := range codes[16*p : 16*p+16] {
							pr[c] = float32(s*q) + b
						}
					}
				}
				a.n = kc
				for p := range np {
					a.p = unsafe.Pointer(&panel[p*denseKC*16])
					ap := acc[p*rows*16 : (p+1)*rows*16]
					for i := 0; i < rows; i += 4 {
						a.a = unsafe.Pointer(&x[(r0+i)*k+l0])
						a.out = unsafe.Pointer(&ap[16*i])
						denseRefRows(&a, min(4, rows-i))
					}
				}
			}
			for p := range np {
				ap := acc[p*rows*16 : (p+1)*rows*16]
				for i := range rows {
					out := dst[(r0+i)*n+c0+16*p : (r0+i)*n+c0+16*p+16]
					for c, v := range ap[16*i : 16*i+16] {
						out[c] = round(v)
					}
				}
			}
		}
	}
}
