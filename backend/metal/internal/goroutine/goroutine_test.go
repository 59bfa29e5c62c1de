package goroutine

import (
	"sync"
	"testing"
)

// Current is stable within a goroutine and differs between goroutines that
// are alive at the same time.
func TestCurrent(t *testing.T) {
	if !Supported {
		t.Skip("goroutine.Current is not supported on this architecture; the MLX backend uses its cgo fallback")
	}
	const n = 8
	ids := make([]uintptr, n)
	var started, done sync.WaitGroup
	release := make(chan struct{})
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ids[i] = Current()
			started.Done()
			<-release // stay alive until every id is taken
			if got := Current(); got != ids[i] {
				t.Errorf("got %#x, want %#x as before (goroutine %d)", got, ids[i], i)
			}
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	me := Current()
	seen := map[uintptr]int{me: -1}
	for i, id := range ids {
		if id == 0 {
			t.Errorf("got 0 for goroutine %d, want a descriptor address", i)
		}
		if j, dup := seen[id]; dup {
			t.Errorf("goroutines %d and %d (-1: the test's) got the same id %#x", i, j, id)
		}
		seen[id] = i
	}
}
