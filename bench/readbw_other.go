//go:build !amd64

package bench

// sumStream adds the words of p (sumWords; the prefetching form is amd64
// only).
func sumStream(p []uint64) uint64 { return sumWords(p) }
