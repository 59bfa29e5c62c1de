//go:build amd64

package kernel

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkFMAPeak measures the float32 FMA rate of this machine: fmaPeak
// (twelve independent AVX-512 VFMADD231PS chains, nothing else) on 1 and 2
// goroutines at once. "GMAC/s" is the multiply-adds per wall second of all
// goroutines together; BenchmarkQMMPrefill's GMAC/cpu-s of the reference
// GEMMs divided by the one-goroutine figure is their share of the peak.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench FMAPeak
func BenchmarkFMAPeak(b *testing.B) {
	if !asmF32 {
		b.Skip("SKIPPED: this CPU lacks AVX-512")
	}
	const iters = 20_000_000 // 3.84 G multiply-adds a goroutine
	for _, g := range []int{1, 2} {
		b.Run(fmt.Sprintf("goroutines%d", g), func(b *testing.B) {
			var secs float64
			for b.Loop() {
				t0 := time.Now()
				var wg sync.WaitGroup
				for range g {
					wg.Go(func() { fmaPeak(iters) })
				}
				wg.Wait()
				secs += time.Since(t0).Seconds()
			}
			b.ReportMetric(float64(g)*iters*192/1e9*float64(b.N)/secs, "GMAC/s")
		})
	}
}
