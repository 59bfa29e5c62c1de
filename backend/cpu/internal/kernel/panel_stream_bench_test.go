//go:build amd64

package kernel

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkPanelStream is an experiment for eight-row decode: what the
// int8 GEMM (q8gemm, q8gemmDot) costs per step when the weights are
// already stored as its panels (transposed once, as a load-time repack
// would), against BenchmarkBatchStream's rows1 and rows8/gemm, which
// transpose every panel on every call. The same layers as
// BenchmarkBatchStream: the panels (4-bit weights split into one code per
// byte, so twice their packed bytes; 8-bit ones the same bytes) and their
// scales and biases (float32, [group][16]) are built once, then each
// iteration quantizes the eight rows of x per matrix and runs the kernel
// over every panel in order, on one thread, prefetching the next panel as
// q8Job does. "GB/s-cpu" counts the packed weight bytes as
// BenchmarkBatchStream does, so the two compare directly.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench PanelStream -cpu 1 -benchtime 10x
func BenchmarkPanelStream(b *testing.B) {
	if !asmQ8 {
		b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
	}
	smol, cpm := streamModels()
	const m = 8
	for _, model := range []struct {
		name, dt string
		layers   []layer
	}{{"smollm2", "f16", smol}, {"minicpm5", "bf16", cpm}} {
		type mat struct {
			layer
			panels []byte    // per panel of 16 rows: pb bytes
			sb     []float32 // per panel: scales then biases, gp·16 each
			pb, gp int
			wq     []uint32
			sc, bi Vec
		}
		var mats []mat
		var bytes int64
		maxN := 0
		for i, l := range model.layers {
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(i), l.n, l.k, l.gs, l.bits)
			scv, biv := avxVecs(model.dt, sc, bi, sb, bb)
			bytes += int64(4*len(wq) + 2*len(sb) + 2*len(bb))
			maxN = max(maxN, l.n, l.k)
			wpr, ng := WordsPerRow(l.k, l.bits), l.k/l.gs
			gp := (ng + 15) &^ 15
			full, tail := wpr/16, wpr%16
			cb := 1024
			if l.bits == 4 {
				cb = 2048
			}
			nch := full
			if tail > 0 {
				nch++
			}
			pb := nch * cb
			np := l.n / q8C
			mt := mat{layer: l, pb: pb, gp: gp, wq: wq, sc: scv, bi: biv}
			buf := make([]byte, np*pb+64)
			mt.panels = buf[uintptr(align64(buf))-uintptr(ptr(buf)):][:np*pb]
			mt.sb = make([]float32, np*2*gp*q8C)
			rows := make([]uint32, q8C*nch*16)
			st := make([]float32, q8C*ng+16)
			for p := range np {
				j0 := p * q8C
				clear(rows)
				for r := range q8C {
					copy(rows[r*nch*16:], wq[(j0+r)*wpr:(j0+r+1)*wpr])
				}
				q8Transpose(ptr(mt.panels[p*pb:]), ptr(rows), uintptr(4*nch*16), nch, l.bits == 4)
				for h, v := range []Vec{scv, biv} {
					clear(st)
					v.load(st[:q8C*ng], j0*ng)
					q8Transpose(ptr(mt.sb[(2*p+h)*gp*q8C:]), ptr(st), uintptr(4*ng), gp/16, false)
				}
			}
			mats = append(mats, mt)
		}
		x := randVec(newRand(3), m*maxN, 1, tensor.RoundBF16)
		dst := make([]float32, m*maxN)
		// run computes x·W for every matrix from the panels; check holds
		// each result to QuantizedMatmulTVec's (the same bits).
		var gx []int8
		var gd, gxs, xsf []float32
		run := func(check bool) {
			for _, w := range mats {
				k, n, gs := w.k, w.n, w.gs
				nb, ng := k/32, k/gs
				gx, gd, gxs, xsf = grow(gx, nb*32*q8R), grow(gd, nb*q8R), grow(gxs, ng*q8R), grow(xsf, m*ng)
				groupSumsFlat(xsf, x[:m*k], m*ng, gs)
				for r := range m {
					q8Quant(&x[r*k], &gx[32*r], &gd[r], nb, 32*q8R, 4*q8R, w.bits == 4)
					for g := range ng {
						gxs[g*q8R+r] = xsf[r*ng+g]
					}
				}
				dot := gemmDot(k, gs, w.bits)
				a := q8gArgs{x: ptr(gx), d: ptr(gd), xs: ptr(gxs), ostr: uintptr(4 * n), ng: ng, bpg: gs / 32, mt: 1, mlast: m,
					cmask: 0xffff, bf16: 1, pfg: uintptr(max(512, (w.pb/ng+511)&^511)), pfl2: gemmPFL2}
				np := n / q8C
				for p := range np {
					a.panel = unsafe.Pointer(&w.panels[p*w.pb])
					a.s = ptr(w.sb[2*p*w.gp*q8C:])
					a.b = ptr(w.sb[(2*p+1)*w.gp*q8C:])
					a.out = ptr(dst[p*q8C:])
					a.pf, a.pfn, a.spn = 0, 0, 0
					if p+1 < np {
						a.pf, a.pfn = uintptr(unsafe.Pointer(&w.panels[(p+1)*w.pb])), w.pb
						a.sps, a.spb, a.spn = uintptr(ptr(w.sb[2*(p+1)*w.gp*q8C:])), uintptr(ptr(w.sb[(2*p+3)*w.gp*q8C:])), 4*w.gp*q8C
					}
					if dot {
						q8gemmDot(&a)
					} else {
						q8gemm(&a)
					}
				}
				if check {
					want := make([]float32, m*n)
					QuantizedMatmulTVec(want, x[:m*k], w.wq, w.sc, w.bi, m, n, k, gs, w.bits, tensor.RoundBF16, AccQ8)
					for i := range want {
						if want[i] != dst[i] {
							b.Fatalf("%v: output %d is %g, QuantizedMatmulTVec gives %g", w.layer, i, dst[i], want[i])
						}
					}
				}
			}
		}
		run(true)
		b.Run(model.name+"/rows8", func(b *testing.B) {
			b.SetBytes(bytes)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0 := threadCPU()
			for b.Loop() {
				run(false)
			}
			if sec := (threadCPU() - t0).Seconds(); sec > 0 {
				b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s-cpu")
			}
		})
	}
}
