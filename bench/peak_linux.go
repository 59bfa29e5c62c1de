package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// resetPeakRSS starts a new peak of the process's resident set (Linux:
// writing 5 to /proc/self/clear_refs resets VmHWM to the current RSS) and
// reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS returns the process's peak resident set since it started or since
// the last resetPeakRSS, in bytes (VmHWM of /proc/self/status), or 0 when
// unknown.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}
