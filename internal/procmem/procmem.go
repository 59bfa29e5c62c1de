// Package procmem reads and resets the process's peak resident set size
// through Linux's /proc (elsewhere the peak is unknown: 0, and it cannot be
// reset).
package procmem

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// PeakRSS returns the process's peak resident set size in bytes, since it
// started or since the last ResetPeak (the VmHWM line of /proc/self/status),
// or 0 where that file does not exist (macOS) or cannot be parsed.
func PeakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}

// ResetPeak starts a new peak at the current resident set (writing 5 to
// /proc/self/clear_refs) and reports whether it could. It also lowers the
// peak the kernel reports for the process at exit (ru_maxrss).
func ResetPeak() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
