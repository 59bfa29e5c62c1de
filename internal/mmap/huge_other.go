//go:build !linux

package mmap

// HugePage is the size of an x86-64 or arm64 transparent huge page.
const HugePage = 2 << 20

// AllocHuge returns n zeroed bytes of Go heap memory and a free that does
// nothing: huge pages are advised on Linux only.
func AllocHuge(n int) (b []byte, free func()) { return make([]byte, n), func() {} }

// HugeAdvised reports false: huge pages are advised on Linux only.
func HugeAdvised(addr uintptr) bool { return false }
