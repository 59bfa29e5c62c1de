//go:build amd64

package kernel

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkFMAPeak measures the arithmetic rates of this machine: fmaPeak
// (twelve independent AVX-512 VFMADD231PS chains, nothing else), where the
// CPU has AVX-512, and with AVX2 fmaPeakAVX2 (the same on YMM registers)
// mulAddPeakAVX2 (the reference kernels' separate VMULPS and VADDPS) and
// maddPeakAVX2 (the int8 kernels' VPMADDUBSW + VPADDW pairs), and with
// AVX-512 refUnitPeak (the arithmetic of qzmmF32B4's unit, the reference
// one-row 4-bit kernel, from registers), each on
// 1 and 2 goroutines at once. "GMAC/s" is the multiply-adds per wall second of all
// goroutines together; BenchmarkQMMPrefill's GMAC/cpu-s of the reference
// GEMMs divided by the one-goroutine figure is their share of the peak.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench FMAPeak
func BenchmarkFMAPeak(b *testing.B) {
	const iters = 20_000_000
	kernels := []struct {
		name string
		on   bool
		macs int // multiply-adds an iteration
		fn   func(int)
	}{
		{"avx512-fma-f32", asmF32, 192, fmaPeak},
		{"avx512-ref-unit-b4", asmF32, 256, refUnitPeak},
		{"avx2-fma-f32", avxQMM, 96, fmaPeakAVX2},
		{"avx2-mul-add-f32", avxQMM, 96, mulAddPeakAVX2},
		{"avx2-maddubsw-int8", avxQMM, 256, maddPeakAVX2},
	}
	for _, k := range kernels {
		for _, g := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/goroutines%d", k.name, g), func(b *testing.B) {
				if !k.on {
					b.Skip("SKIPPED: this CPU lacks the instructions")
				}
				var secs float64
				for b.Loop() {
					t0 := time.Now()
					var wg sync.WaitGroup
					for range g {
						wg.Go(func() { k.fn(iters) })
					}
					wg.Wait()
					secs += time.Since(t0).Seconds()
				}
				b.ReportMetric(float64(g*iters*k.macs)/1e9*float64(b.N)/secs, "GMAC/s")
			})
		}
	}
}
