//go:build unix

package bench

import (
	"os"
	"runtime"
	"syscall"
)

// maxRSS returns a finished child's peak resident set in bytes (ru_maxrss:
// kilobytes on Linux, bytes on macOS), or 0 when unknown.
func maxRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return int64(ru.Maxrss)
	}
	return int64(ru.Maxrss) * 1024
}
