package mmap

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"unsafe"
)

// TestRelease: Release drops the whole pages inside a slice of a mapping
// from the process (the mapping's Rss in /proc/self/smaps falls by them),
// the bytes read the same afterwards, and memory that Map did not map (the
// Go heap, an unmapped mapping) is left alone.
func TestRelease(t *testing.T) {
	page := os.Getpagesize()
	want := make([]byte, 64*page)
	for i := range want {
		want[i] = byte(i*7 + i/page)
	}
	b, unmap, err := Map(tempFile(t, want), len(want))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(b); i += page {
		sink += b[i] // fault every page in
	}
	before := mappingRss(t, b)
	// From the middle of page 3 to the middle of page 43: pages 4-42 are
	// wholly inside.
	if got := Release(b[3*page+100 : 43*page+100]); got != int64(39*page) {
		t.Errorf("Release returned %d bytes, want %d (39 pages)", got, 39*page)
	}
	if after := mappingRss(t, b); before-after != int64(39*page) {
		t.Errorf("the mapping's Rss went from %d to %d bytes, want it %d lower", before, after, 39*page)
	}
	if !bytes.Equal(b, want) {
		t.Error("the mapping's bytes changed after Release")
	}
	heap := bytes.Repeat([]byte{7}, 8*page)
	if got := Release(heap); got != 0 || bytes.Count(heap, []byte{7}) != len(heap) {
		t.Errorf("Release of heap memory returned %d and left %d of %d bytes, want 0 and all", got, bytes.Count(heap, []byte{7}), len(heap))
	}
	if got := Release(b[:page/2]); got != 0 {
		t.Errorf("Release of half a page returned %d, want 0", got)
	}
	view := b
	if err := unmap(b); err != nil {
		t.Fatal(err)
	}
	if got := Release(view); got != 0 {
		t.Errorf("Release after unmap returned %d, want 0", got)
	}
}

// sink keeps the page-touching reads of TestRelease.
var sink byte

// mappingRss is the Rss, in bytes, of the /proc/self/smaps entry holding b.
func mappingRss(t *testing.T, b []byte) int64 {
	t.Helper()
	v, ok := smapsField(t, uintptr(unsafe.Pointer(&b[0])), "Rss")
	if !ok {
		t.Fatalf("no /proc/self/smaps entry holds %p", &b[0])
	}
	var kb int64
	if _, err := fmt.Sscanf(v, "%d kB", &kb); err != nil {
		t.Fatalf("smaps Rss %q: %v", v, err)
	}
	return kb << 10
}

// smapsField returns the value of field name ("Rss", "VmFlags") in the
// /proc/self/smaps entry of the mapping holding addr, and false when no
// mapping holds it.
func smapsField(t *testing.T, addr uintptr, name string) (string, bool) {
	t.Helper()
	v, ok, err := smapsValue(addr, name)
	if err != nil {
		t.Fatalf("reading /proc/self/smaps: %v", err)
	}
	return v, ok
}
