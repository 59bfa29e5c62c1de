//go:build mlx

package metal

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// rss reads the anonymous and file-backed resident bytes of this process.
func rss(t *testing.T) (anon, file int64) {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "RssAnon:":
			anon = kb << 10
		case "RssFile:":
			file = kb << 10
		}
	}
	return anon, file
}

// TestBorrowIsZeroCopy hands a memory-mapped 64 MiB weight to MLX with Borrow
// and with FromHost, reads it all through an op, and compares what each adds
// to MLX's active memory and to the process's anonymous resident memory.
// 4096*4096 float32 = 67,108,864 bytes.
func TestBorrowIsZeroCopy(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SKIP (loud): the resident-memory breakdown reads /proc/self/status, Linux only")
	}
	const n = 4096
	const size = n * n * 4
	path := filepath.Join(t.TempDir(), "w.safetensors")
	func() {
		v := make([]float32, n*n)
		for i := range v {
			v[i] = float32(i%7) - 3
		}
		if err := tensor.WriteSafetensors(path, []string{"w"}, []*tensor.Dense{tensor.FromFloat32(tensor.Shape{n, n}, v)}, nil); err != nil {
			t.Fatal(err)
		}
	}()
	debug.FreeOSMemory()
	f, err := tensor.OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := f.Tensor("w")
	if err != nil {
		t.Fatal(err)
	}
	if !f.IsView(w) {
		t.Fatal("tensor is not a view of the mapping")
	}

	b := open(t)
	var aliased bool
	var liveBytes int64
	measure := func(wrap func(*tensor.Dense) backend.Array) (active, anon int64) {
		debug.FreeOSMemory()
		a0, _ := rss(t)
		m0 := b.Memory().Active
		x := wrap(w)
		aliased, liveBytes = x.(*Array).Aliased(), b.Stats().LiveBytes
		row := b.Slice(x, []int{n - 1, 0}, []int{n, n})
		total := b.Sum(b.Sum(x, 1, false), 0, false) // reads every element
		if err := b.Eval(total, row); err != nil {
			t.Fatal(err)
		}
		active = b.Memory().Active - m0
		a1, _ := rss(t)
		got, err := b.ToHost(row)
		if err != nil {
			t.Fatal(err)
		}
		if want := w.Data[(n-1)*n*4:]; !bytes.Equal(got.Data, want) {
			t.Errorf("last row differs from the file's bytes")
		}
		b.Release(x, row, total)
		return active, a1 - a0
	}
	borrowActive, borrowAnon := measure(b.Borrow)
	borrowAliased, borrowLive := aliased, liveBytes
	copyActive, copyAnon := measure(b.FromHost)
	t.Logf("Borrow (aliased=%v): MLX active +%d B, RssAnon +%d B; FromHost: MLX active +%d B, RssAnon +%d B (weight %d B)",
		borrowAliased, borrowActive, borrowAnon, copyActive, copyAnon, size)
	if !borrowAliased {
		t.Logf("MLX copied the borrowed buffer (its %s allocator cannot wrap foreign memory)", b.Device())
		if borrowLive != size {
			t.Errorf("Borrow copied: got LiveBytes %d, want %d (the copy is counted)", borrowLive, size)
		}
		if borrowActive < size {
			t.Errorf("Borrow reports a copy but MLX active grew only %d B (< %d)", borrowActive, size)
		}
	} else if borrowActive >= size/16 {
		t.Errorf("Borrow: got MLX active +%d B, want far below the weight's %d B (no copy)", borrowActive, size)
	}
	if borrowAliased && borrowAnon >= size/4 {
		t.Errorf("Borrow: got RssAnon +%d B, want far below the weight's %d B (no copy)", borrowAnon, size)
	}
	if copyActive < size {
		t.Errorf("FromHost: got MLX active +%d B, want at least %d B (the copy); the measurement cannot see copies", copyActive, size)
	}
	if alive := BorrowsAlive(); alive != 0 {
		t.Errorf("got %d borrowed buffers still referenced by MLX after Release, want 0", alive)
	}
}

// TestBorrowReleasesMappedPages: when MLX copies a tensor borrowed from a
// memory-mapped file (its allocator cannot wrap foreign memory, as on
// Linux), the mapping's pages leave the process's resident set (RssFile
// falls by about the tensor's size: the weight is not resident twice), and
// the tensor still reads the file's bytes afterwards. 2048*2048 float32 =
// 16 MiB.
func TestBorrowReleasesMappedPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SKIP (loud): RssFile comes from /proc/self/status, Linux only")
	}
	const n = 2048
	const size = n * n * 4
	v := make([]float32, n*n)
	for i := range v {
		v[i] = float32(i%11) - 5
	}
	want := tensor.FromFloat32(tensor.Shape{n, n}, v)
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := tensor.WriteSafetensors(path, []string{"w"}, []*tensor.Dense{want}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := tensor.OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := f.Tensor("w")
	if err != nil {
		t.Fatal(err)
	}
	if !f.IsView(w) {
		t.Fatal("tensor is not a view of the mapping")
	}
	b := open(t)
	var sum byte
	for i := 0; i < len(w.Data); i += 4096 { // fault every page in
		sum += w.Data[i]
	}
	_, before := rss(t)
	x := b.Borrow(w)
	defer b.Release(x)
	_, after := rss(t)
	if x.(*Array).Aliased() {
		t.Skipf("SKIP (loud): MLX on %s aliased the mapping, so no copy and nothing to release", b.Device())
	}
	if drop := before - after; drop < size*3/4 {
		t.Errorf("RssFile fell by %d B after Borrow copied a mapped %d B tensor, want at least %d B (checksum %d)", drop, size, size*3/4, sum)
	}
	if !bytes.Equal(w.Data, want.Data) {
		t.Errorf("the mapped tensor's bytes changed after Borrow")
	}
	got, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, want.Data) {
		t.Errorf("the borrowed array's bytes differ from the file's")
	}
}
