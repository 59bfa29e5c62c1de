package mmap

import (
	"testing"
	"unsafe"
)

// TestArenaHugePages: with the real AllocHuge, an Arena's chunk is one
// huge-page-aligned mapping advised for huge pages, and small pieces come
// from it.
func TestArenaHugePages(t *testing.T) {
	var a Arena
	b1, free1 := a.Alloc(1000)
	b2, free2 := a.Alloc(5000)
	defer free2()
	defer free1()
	base := uintptr(unsafe.Pointer(&b1[0]))
	if base%HugePage != 0 {
		t.Errorf("the first piece starts at %#x, want the start of a %d-byte aligned chunk", base, HugePage)
	}
	if got := uintptr(unsafe.Pointer(&b2[0])); got != base+1024 {
		t.Errorf("the second piece starts at %#x, want %#x (the first one's 1000 bytes rounded up to 64)", got, base+1024)
	}
	if !HugeAdvised(base) {
		t.Errorf("the chunk at %#x is not advised for huge pages", base)
	}
}
