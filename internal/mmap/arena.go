package mmap

import (
	"sync"
	"unsafe"
)

// Arena hands buffers smaller than a huge page out of shared chunks of
// AllocHuge memory, so that many small streamed buffers (a small model's
// packed weight matrices, a few hundred KB each) sit on huge pages too
// instead of on the Go heap's 4 KiB pages, where the hardware prefetchers
// stop at every page boundary. Buffers of HugePage bytes or more get an
// AllocHuge mapping of their own. Pieces are carved from the current chunk
// one after the other (each starting on a 64-byte boundary) and never
// reused; a chunk is freed once the arena has moved on to the next chunk
// and every piece of it has been freed. The zero Arena is ready to use and
// safe for concurrent use.
type Arena struct {
	// ChunkSize is the size of a chunk (0: ArenaChunk).
	ChunkSize int

	mu    sync.Mutex
	chunk *arenaChunk
	alloc func(n int) ([]byte, func()) // AllocHuge (tests count the chunks)
}

// ArenaChunk is the default size of an Arena's chunks.
const ArenaChunk = 8 * HugePage

type arenaChunk struct {
	mem        []byte
	free       func()
	used, live int
	retired    bool // the arena has moved on to another chunk
}

// Alloc returns n zeroed bytes (len and cap n), starting on a 64-byte
// boundary, and the function that frees them (safe to call more than once;
// the bytes must not be used after it).
func (a *Arena) Alloc(n int) (b []byte, free func()) {
	alloc := a.alloc
	if alloc == nil {
		alloc = AllocHuge
	}
	if n >= HugePage {
		return alloc(n)
	}
	size := a.ChunkSize
	if size <= 0 {
		size = ArenaChunk
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.chunk
	if c == nil || c.used+n > len(c.mem) {
		if c != nil {
			a.retire(c)
		}
		mem, f := alloc(max(size, n+64))
		// Chunks of AllocHuge start on a huge-page boundary; one that
		// fell back to the Go heap may not: skip to a 64-byte boundary.
		c = &arenaChunk{mem: mem, free: f, used: align64Off(mem)}
		a.chunk = c
	}
	b = c.mem[c.used : c.used+n : c.used+n]
	c.used = min(len(c.mem), c.used+(n+63)&^63)
	c.live++
	var once sync.Once
	return b, func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			c.live--
			if c.live == 0 && c.retired {
				c.free()
			}
		})
	}
}

// retire marks c as no longer allocated from, freeing it if nothing of it
// is in use.
func (a *Arena) retire(c *arenaChunk) {
	c.retired = true
	if c.live == 0 {
		c.free()
	}
}

// align64Off is how many bytes from the start of b its first 64-byte
// boundary is.
func align64Off(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(-uintptrOf(b) & 63)
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
