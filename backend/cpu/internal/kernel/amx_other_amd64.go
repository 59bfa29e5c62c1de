//go:build amd64 && !linux

package kernel

// amxPermit reports false: the AMX kernels run on Linux only
// (amx_linux_amd64.go says how it grants them).
func amxPermit() bool { return false }
