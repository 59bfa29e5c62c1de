package mmap

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"unsafe"
)

// chunkLog stands in for AllocHuge in an Arena: Go heap chunks, with a
// count of the live ones and of each chunk's frees.
type chunkLog struct {
	live  int
	frees map[*byte]int
	sizes []int
}

func (l *chunkLog) alloc(n int) ([]byte, func()) {
	b := make([]byte, n)
	l.live++
	l.sizes = append(l.sizes, n)
	return b, func() {
		l.live--
		l.frees[&b[0]]++
	}
}

// TestArena: pieces are zeroed, 64-byte aligned, of the asked length and
// capacity, and do not overlap; a chunk is freed exactly once, when the
// arena has moved past it and its last piece is freed (or at once when it
// moves past a chunk with nothing left in use; a piece freed twice counts
// once); pieces of HugePage bytes and more get an allocation of their own.
func TestArena(t *testing.T) {
	const chunk = 4096
	for _, c := range []struct {
		name string
		ops  []int // n > 0: Alloc(n); n <= 0: free piece -n
		// chunks allocated, and chunks still live at the end
		chunks, live int
	}{
		{"one piece", []int{100}, 1, 1},
		{"fits in one chunk, kept while current", []int{1000, 1000, 1000, 0, -1, -2}, 1, 1},
		{"moves to a second chunk", []int{3000, 3000}, 2, 2},
		{"retired chunk freed with its last piece", []int{3000, 3000, 0}, 2, 1},
		{"retired chunk kept while a piece lives", []int{2000, 1000, 3000, 0}, 2, 2},
		{"double free counts once", []int{2000, 1000, 3000, 0, 0}, 2, 2},
		{"double free, then the last piece", []int{2000, 1000, 3000, 0, 0, -1}, 2, 1},
		{"empty chunk freed as the arena moves on", []int{3000, 0, 3000}, 2, 1},
		{"large piece on its own", []int{100, HugePage, -1}, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := &chunkLog{frees: map[*byte]int{}}
			a := &Arena{ChunkSize: chunk, alloc: log.alloc}
			var pieces [][]byte
			var frees []func()
			freed := map[int]bool{}
			for _, op := range c.ops {
				if op <= 0 {
					frees[-op]()
					freed[-op] = true
					continue
				}
				b, f := a.Alloc(op)
				if len(b) != op || cap(b) != op {
					t.Fatalf("Alloc(%d): len %d, cap %d", op, len(b), cap(b))
				}
				if addr := uintptr(unsafe.Pointer(&b[0])); addr%64 != 0 {
					t.Errorf("Alloc(%d) starts at %#x, not on a 64-byte boundary", op, addr)
				}
				if i := slices.IndexFunc(b, func(x byte) bool { return x != 0 }); i >= 0 {
					t.Fatalf("Alloc(%d): byte %d is %d, want zeroed memory", op, i, b[i])
				}
				for i := range b {
					b[i] = byte(len(pieces) + 1)
				}
				pieces, frees = append(pieces, b), append(frees, f)
			}
			for i, p := range pieces { // no live piece was overwritten by another
				if freed[i] {
					continue
				}
				if j := slices.IndexFunc(p, func(x byte) bool { return x != byte(i+1) }); j >= 0 {
					t.Fatalf("piece %d byte %d is %#x, want %#x: pieces overlap", i, j, p[j], i+1)
				}
			}
			if got := len(log.sizes); got != c.chunks {
				t.Errorf("%d chunks allocated (%v), want %d", got, log.sizes, c.chunks)
			}
			if log.live != c.live {
				t.Errorf("%d chunks live at the end, want %d", log.live, c.live)
			}
			for p, n := range log.frees {
				if n != 1 {
					t.Errorf("chunk at %p freed %d times", p, n)
				}
			}
		})
	}
}

// TestArenaConcurrent: pieces allocated and freed from several goroutines
// at once keep their own bytes, and once every piece is freed only the
// arena's current chunk is still allocated, each other one freed exactly
// once (run with -race too).
func TestArenaConcurrent(t *testing.T) {
	log := &chunkLog{frees: map[*byte]int{}}
	var mu sync.Mutex // chunkLog is not safe for concurrent use: the arena calls it under its lock, the test's reads come after
	a := &Arena{ChunkSize: 1 << 16, alloc: func(n int) ([]byte, func()) {
		mu.Lock()
		defer mu.Unlock()
		b, free := log.alloc(n)
		return b, func() { mu.Lock(); defer mu.Unlock(); free() }
	}}
	const workers, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Go(func() {
			var pieces [][]byte
			var frees []func()
			for i := range each {
				b, free := a.Alloc(1 + (w*7919+i*104729)%3000)
				for j := range b {
					b[j] = byte(w + 1)
				}
				pieces, frees = append(pieces, b), append(frees, free)
			}
			for i, p := range pieces {
				if j := slices.IndexFunc(p, func(x byte) bool { return x != byte(w+1) }); j >= 0 {
					errs <- fmt.Sprintf("worker %d piece %d byte %d is %#x, want %#x: pieces overlap", w, i, j, p[j], w+1)
					break
				}
			}
			for _, f := range frees {
				f()
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if log.live != 1 {
		t.Errorf("%d chunks live after every piece was freed, want 1 (the current one)", log.live)
	}
	for p, n := range log.frees {
		if n != 1 {
			t.Errorf("chunk at %p freed %d times", p, n)
		}
	}
	if len(log.sizes) < 2 {
		t.Errorf("%d chunks allocated, want several (the test moves the arena on)", len(log.sizes))
	}
}
