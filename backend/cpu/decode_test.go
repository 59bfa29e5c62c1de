package cpu

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// The decode step of a small fixture checkpoint (optiq-bf16: MiniCPM5's
// graph with 3 layers, bf16 activations and mixed 4/8-bit weights), driven
// as generate's device-greedy loop drives it: forward the token, log-softmax
// the logits row (LogSumExp, Subtract), Argmax, read the token back. The
// benchmark reports the heap allocations and bytes of one step; the test
// holds the live heap flat across steps.

// decoder runs decode steps on one model and cache.
type decoder struct {
	b     *Backend
	m     *minicpm5.Model
	cache []nn.KVCache
	tok   int32
}

func newDecoder(tb testing.TB, name string) *decoder {
	tb.Helper()
	root := os.Getenv("MLXGO_MODEL_FIXTURES")
	if root == "" {
		root = filepath.Join(testenv.RepoRoot(tb), "conformance", "testdata", "models")
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		testenv.Missing(tb, "fixture checkpoint "+dir+" is missing (run `make oracle`); decode allocations are not measured")
	}
	b, err := New(backend.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		tb.Fatal(err)
	}
	d := &decoder{b: b, m: m, cache: m.NewCache(), tok: 1}
	tb.Cleanup(func() {
		d.reset()
		m.Close()
		b.Close()
	})
	return d
}

// reset empties the cache.
func (d *decoder) reset() {
	for _, c := range d.cache {
		c.Release()
	}
	d.cache = d.m.NewCache()
}

// step decodes one token greedily and feeds it back next time.
func (d *decoder) step(tb testing.TB) {
	b := d.b
	sc := b.Scope()
	ids := b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{d.tok}))
	logits, err := d.m.LastLogits(ids, d.cache)
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range d.cache {
		sc.Keep(c.State()...)
	}
	s := logits.Shape()
	logits = b.Reshape(logits, 1, s[len(s)-1])
	out := b.Argmax(b.Binary(backend.Subtract, logits, b.LogSumExp(logits, -1, true)), -1, false)
	sc.Keep(out)
	sc.Close()
	h, err := b.ToHost(out)
	if err != nil {
		tb.Fatal(err)
	}
	b.Release(out)
	d.tok = int32(h.Uint32s()[0])
}

// BenchmarkDecodeStep: allocs/op and B/op are the heap allocations of one
// decode step. The cache is emptied every 200 steps (outside the timing),
// so every step attends to at most 200 positions.
func BenchmarkDecodeStep(b *testing.B) {
	defer func(p bool) { poison = p }(poison)
	poison = false // measure the real pool, not the tests' poisoning
	d := newDecoder(b, "optiq-bf16")
	for range 8 {
		d.step(b)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if n++; n%200 == 0 {
			b.StopTimer()
			d.reset()
			b.StartTimer()
		}
		d.step(b)
	}
}

// TestDecodeHeapFlat decodes 600 tokens and checks that the live heap
// after a garbage collection does not grow from step 300 to step 600 by
// more than the KV buffers' growth in that span (one KVStep of 256 slots,
// 2 buffers per layer) plus 64 KiB of slack for the runtime's own
// bookkeeping: nothing else may accumulate per token. (The buffer pool is
// emptied before each measurement: what it holds is reusable, not live.)
func TestDecodeHeapFlat(t *testing.T) {
	d := newDecoder(t, "optiq-bf16")
	cfg := d.m.Config()
	kvStep := int64(2 * cfg.NumHiddenLayers * cfg.NumKeyValueHeads * nn.KVStep * cfg.HeadDim * d.m.DType().Size())
	live := func() int64 {
		d.b.ClearCache() // pooled storage is not live
		// Two collections: the first moves sync.Pool contents (the
		// kernels' scratch) to the pools' victim caches, where they still
		// count; the second frees them.
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var at300 int64
	for i := 1; i <= 600; i++ {
		d.step(t)
		if i == 300 {
			at300 = live()
		}
	}
	grew := live() - at300
	t.Logf("live heap grew %d bytes from step 300 to 600 (KV growth %d)", grew, kvStep)
	if grew > kvStep+64<<10 {
		t.Errorf("live heap grew %d bytes from step 300 to 600, want at most %d (one KV step) + 65536", grew, kvStep)
	}
}

// TestDecodeCacheInPlace: across decode steps that stay within the KV
// buffers' capacity, the cache's SliceUpdate writes its buffers in place
// (no other live array views them then) and ScaledDotProductAttention
// reads the cache's slices in place, so no step copies the cache.
func TestDecodeCacheInPlace(t *testing.T) {
	d := newDecoder(t, "optiq-bf16")
	d.step(t)
	where := func() []unsafe.Pointer {
		var out []unsafe.Pointer
		for _, c := range d.cache {
			for _, a := range c.State() {
				out = append(out, first(a))
			}
		}
		return out
	}
	before := where()
	for range 20 {
		d.step(t)
	}
	for i, p := range where() {
		if p != before[i] {
			t.Fatalf("cache buffer %d moved during decode: SliceUpdate copied it", i)
		}
	}
	// The attention's keys are a slice of a cache buffer: kvOf reads it
	// through its strides, at its storage.
	keys := d.cache[0].State()[0].(*Array)
	s := keys.Shape()
	view := d.b.Slice(keys, []int{0, 0, 0, 0}, []int{s[0], s[1], 21, s[3]}).(*Array)
	kv := d.b.kvOf(view, view.dtype)
	if kv.HStride != s[2]*s[3] || kv.RowStride != s[3] {
		t.Errorf("kvOf strides: head %d, row %d; want %d and %d (the buffer's)", kv.HStride, kv.RowStride, s[2]*s[3], s[3])
	}
	if kv.Vec.U16 == nil || unsafe.Pointer(&kv.Vec.U16[0]) != first(view) {
		t.Errorf("kvOf does not read the cache buffer in place")
	}
	d.b.freeTmps()
	d.b.Release(view)
}
