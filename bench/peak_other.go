//go:build !linux

package bench

// resetPeakRSS cannot reset the peak resident set off Linux: false.
func resetPeakRSS() bool { return false }

// peakRSS is unknown off Linux: 0.
func peakRSS() int64 { return 0 }
