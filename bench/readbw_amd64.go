package bench

// sumLines is the sum of the lines·8 words at p, read a 64-byte line at a
// time with a software prefetch 2 KiB ahead (readbw_amd64.s).
//
//go:noescape
func sumLines(p *uint64, lines int) uint64

// sumStream adds the words of p: whole lines in assembly, the rest in Go.
// The probe's prefetch matters on CPUs whose hardware prefetcher does not
// keep two cores' loads in flight (Zen 5: the scalar loop read 41 GB/s
// where the decode kernels, which prefetch, streamed more).
func sumStream(p []uint64) uint64 {
	n := len(p) / 8
	var s uint64
	if n > 0 {
		s = sumLines(&p[0], n)
	}
	return s + sumWords(p[8*n:])
}
