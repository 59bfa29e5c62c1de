package mmap

import (
	"slices"
	"testing"
	"unsafe"
)

// TestAllocHuge: from HugePage bytes up AllocHuge returns zeroed, writable
// memory of its own mapping, starting on a HugePage boundary and advised
// MADV_HUGEPAGE ("hg" in the mapping's smaps VmFlags), which free unmaps;
// below that, Go heap memory.
func TestAllocHuge(t *testing.T) {
	for _, n := range []int{3*HugePage + 100, HugePage} {
		b, free := AllocHuge(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("AllocHuge(%d): len %d, cap %d", n, len(b), cap(b))
		}
		addr := uintptr(unsafe.Pointer(&b[0]))
		if addr%HugePage != 0 {
			t.Errorf("AllocHuge(%d) starts at %#x, not on a %d-byte boundary", n, addr, HugePage)
		}
		if i := slices.IndexFunc(b, func(c byte) bool { return c != 0 }); i >= 0 {
			t.Fatalf("AllocHuge(%d): byte %d is %d, want zeroed memory", n, i, b[i])
		}
		for i := range b {
			b[i] = byte(i)
		}
		if b[n-1] != byte(n-1) {
			t.Fatalf("AllocHuge(%d): the last byte did not keep its value", n)
		}
		if !HugeAdvised(addr) {
			t.Errorf("AllocHuge(%d): the mapping is not advised for huge pages (no hg in its smaps VmFlags)", n)
		}
		free()
		if _, ok := smapsField(t, addr, "VmFlags"); ok {
			t.Errorf("AllocHuge(%d): a mapping still holds %#x after free", n, addr)
		}
	}
	small, free := AllocHuge(HugePage - 1)
	defer free()
	if len(small) != HugePage-1 {
		t.Fatalf("AllocHuge(%d): len %d", HugePage-1, len(small))
	}
	if HugeAdvised(uintptr(unsafe.Pointer(&small[0]))) {
		t.Errorf("AllocHuge(%d) below HugePage got huge-page advice; want Go heap memory", HugePage-1)
	}
}
