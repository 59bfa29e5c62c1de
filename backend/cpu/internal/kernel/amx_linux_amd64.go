//go:build amd64 && linux

package kernel

import (
	"syscall"
	"unsafe"
)

// Linux gives a process the AMX tile registers only on request
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, since 5.16):
// until then the tile instructions fault (SIGILL) though CPUID lists them.
// The permission is the whole process's, and the signal frames it needs
// (about 11 KB) fit Go's 32 KB signal stacks.
const (
	archGetXcompPerm = 0x1022
	archReqXcompPerm = 0x1023
	xfeatureTileData = 18
)

// amxPermit asks the kernel for the tile registers and reports whether the
// process has them.
func amxPermit() bool {
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureTileData, 0); e != 0 {
		return false
	}
	var mask uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archGetXcompPerm, uintptr(unsafe.Pointer(&mask)), 0); e != 0 {
		return false
	}
	return mask&(1<<xfeatureTileData) != 0
}
