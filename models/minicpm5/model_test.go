package minicpm5

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

func release(cache []nn.KVCache) {
	for _, c := range cache {
		c.Release()
	}
}

// step feeds one token through cache and returns its logits row.
func step(t *testing.T, m *Model, cache []nn.KVCache, tok int32) []float32 {
	t.Helper()
	b := m.Backend()
	x := b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{tok}))
	out, err := m.Forward(x, cache, ForwardOptions{})
	b.Release(x)
	if err != nil {
		t.Fatal(err)
	}
	row := host(t, b, out.Logits)
	b.Release(out.Logits)
	return row
}

// fixture returns the fixture checkpoint named name.
func fixture(t *testing.T, name string) string {
	t.Helper()
	for _, d := range checkpoints(t) {
		if filepath.Base(d) == name {
			return d
		}
	}
	t.Fatalf("fixture checkpoint %s missing under %s", name, fixtureRoot)
	return ""
}

func prompt(n int, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % vocab)
	}
	return ids
}

// TestChunkedPrefillEqualsOneShot: on the CPU backend every kernel computes
// a row from that row's inputs alone, in a fixed order, so the logits of a
// prompt prefilled in chunks must equal the one-shot logits bit for bit.
func TestChunkedPrefillEqualsOneShot(t *testing.T) {
	for _, dir := range checkpoints(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := newCPU(t)
			m := load(t, b, dir)
			ids := prompt(40, m.Config().VocabSize)
			var ref []float32
			for _, chunk := range []int{40, 16, 7, 1} {
				cache := m.NewCache()
				logits, err := m.Prefill(ids, cache, chunk)
				if err != nil {
					t.Fatal(err)
				}
				got := host(t, b, logits)
				b.Release(logits)
				release(cache)
				if ref == nil {
					ref = got
					continue
				}
				for i := range ref {
					if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
						t.Fatalf("chunk %d: logit %d: got %v, want %v (one-shot)", chunk, i, got[i], ref[i])
					}
				}
			}
		})
	}
}

// TestLogitsRows: the head over chosen rows equals those rows of the full
// head.
func TestLogitsRows(t *testing.T) {
	dir := fixture(t, "optiq-f32")
	b := newCPU(t)
	m := load(t, b, dir)
	V := m.Config().VocabSize
	ids := prompt(9, V)
	x := b.FromHost(tensor.FromInt32(tensor.Shape{1, len(ids)}, ids))
	defer b.Release(x)
	full, err := m.Forward(x, nil, ForwardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := host(t, b, full.Logits)
	b.Release(full.Logits)
	for _, rows := range [][]int{{8}, {2, 3, 4}, {5, 0, 5}} {
		t.Run(fmt.Sprint(rows), func(t *testing.T) {
			out, err := m.Forward(x, nil, ForwardOptions{LogitsRows: rows})
			if err != nil {
				t.Fatal(err)
			}
			if got := out.Logits.Shape(); !got.Equal(tensor.Shape{1, len(rows), V}) {
				t.Fatalf("shape: got %v, want [1 %d %d]", got, len(rows), V)
			}
			got := host(t, b, out.Logits)
			b.Release(out.Logits)
			for i, r := range rows {
				for j := 0; j < V; j++ {
					if got[i*V+j] != all[r*V+j] {
						t.Fatalf("row %d (position %d), logit %d: got %v, want %v", i, r, j, got[i*V+j], all[r*V+j])
					}
				}
			}
		})
	}
}

// TestLiveArraysDoNotGrow decodes 1,000 tokens and checks after every step
// that the live arrays are exactly those after the first step, and that the
// live bytes differ from the first step's only by the KV buffers' growth:
// 2 buffers per layer of [1, Hk, capacity, head_dim], capacity the tokens
// stored rounded up to 256. (Positions run past max_position_embeddings on
// purpose: default RoPE has no limit there, as in mlx_lm.)
func TestLiveArraysDoNotGrow(t *testing.T) {
	dir := fixture(t, "q4g64-f32")
	b := newCPU(t)
	m := load(t, b, dir)
	cfg := m.Config()
	cacheBytes := func(tokens int) int64 {
		capacity := (tokens + nn.KVStep - 1) / nn.KVStep * nn.KVStep
		return int64(2 * cfg.NumHiddenLayers * cfg.NumKeyValueHeads * capacity * cfg.HeadDim * m.DType().Size())
	}
	cache := m.NewCache()
	defer release(cache)
	tok := int32(1)
	var first backend.Stats
	for i := 0; i < 1000; i++ {
		row := step(t, m, cache, tok)
		g, _ := argmax(row)
		tok = int32(g)
		st := b.Stats()
		if i == 0 {
			first = st
			continue
		}
		if st.LiveArrays != first.LiveArrays {
			t.Fatalf("step %d: %d live arrays, want %d (as after step 0)", i, st.LiveArrays, first.LiveArrays)
		}
		if got, want := st.LiveBytes-cacheBytes(i+1), first.LiveBytes-cacheBytes(1); got != want {
			t.Fatalf("step %d: %d live bytes besides the KV buffers, want %d (as after step 0)", i, got, want)
		}
		if st.LeakedByGC != 0 {
			t.Fatalf("step %d: %d arrays freed by the GC safety net, want 0", i, st.LeakedByGC)
		}
	}
	if off := cache[0].Offset(); off != 1000 {
		t.Fatalf("cache offset: got %d, want 1000", off)
	}
}

// TestCloseReleasesEverything: after the caches and the model are released,
// no array is live.
func TestCloseReleasesEverything(t *testing.T) {
	dir := fixture(t, "optiq-bf16")
	b := newCPU(t)
	before := b.Stats()
	m, err := Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := m.NewCache()
	logits, err := m.Prefill(prompt(20, m.Config().VocabSize), cache, 8)
	if err != nil {
		t.Fatal(err)
	}
	b.Release(logits)
	release(cache)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.LiveArrays != before.LiveArrays || st.LiveBytes != before.LiveBytes {
		t.Fatalf("after Close: %d arrays and %d bytes live, want %d and %d", st.LiveArrays, st.LiveBytes, before.LiveArrays, before.LiveBytes)
	}
}

// TestBadConfig: a config the graph cannot run is an error naming the field.
func TestBadConfig(t *testing.T) {
	dir := fixture(t, "optiq-f32")
	for _, c := range []struct {
		name  string
		edit  func(ck *checkpoint.Checkpoint)
		wants []string
	}{
		{"sliding", func(ck *checkpoint.Checkpoint) {
			ck.Config.LayerTypes[1] = "sliding_attention"
			ck.Config.SlidingWindow = 16
		}, []string{"layer_types[1]", "sliding_attention"}},
		{"mode", func(ck *checkpoint.Checkpoint) { ck.Layers[2].Up.Params.Mode = "mxfp4" }, []string{"model.layers.2.mlp.up_proj", `"mxfp4"`, "affine"}},
		{"embed-mode", func(ck *checkpoint.Checkpoint) { ck.Embed.Params.Mode = "nvfp4" }, []string{"model.embed_tokens", `"nvfp4"`}},
		{"rope", func(ck *checkpoint.Checkpoint) { ck.Config.RopeScaling = &checkpoint.RopeScaling{Type: "su"} }, []string{"rope_scaling.type", `"su"`}},
		{"head_dim", func(ck *checkpoint.Checkpoint) { ck.Config.HeadDim = 31 }, []string{"head_dim", "31"}},
		{"model_type", func(ck *checkpoint.Checkpoint) { ck.Config.ModelType = "minicpm" }, []string{"model_type", "minicpm"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newCPU(t)
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			c.edit(ck)
			before := b.Stats()
			m, err := New(b, ck)
			if err == nil {
				m.Close()
				t.Fatalf("New: got no error, want one naming %v", c.wants)
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: got error %q, want it to name %s", err, w)
				}
			}
			if st := b.Stats(); st.LiveArrays != before.LiveArrays {
				t.Errorf("after a failed New: %d live arrays, want %d", st.LiveArrays, before.LiveArrays)
			}
		})
	}
	if _, err := Load(newCPU(t), filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Errorf("Load of a missing directory: got no error")
	}
}

// TestBadInput: misuse of Forward and Prefill is an error, not a panic.
func TestBadInput(t *testing.T) {
	dir := fixture(t, "q4g64-f32")
	b := newCPU(t)
	m := load(t, b, dir)
	V := m.Config().VocabSize
	cache := m.NewCache()
	defer release(cache)
	ids := b.FromHost(tensor.FromInt32(tensor.Shape{1, 3}, []int32{1, 2, 3}))
	defer b.Release(ids)
	flat := b.FromHost(tensor.FromInt32(tensor.Shape{3}, []int32{1, 2, 3}))
	defer b.Release(flat)
	floats := b.FromHost(tensor.FromFloat32(tensor.Shape{1, 3}, []float32{1, 2, 3}))
	defer b.Release(floats)
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"prefill/out-of-vocab", func() error { _, err := m.Prefill([]int32{1, int32(V)}, cache, 4); return err }, "vocab_size"},
		{"prefill/negative-id", func() error { _, err := m.Prefill([]int32{-1}, cache, 4); return err }, "vocab_size"},
		{"prefill/chunk0", func() error { _, err := m.Prefill([]int32{1}, cache, 0); return err }, "chunk"},
		{"prefill/empty", func() error { _, err := m.PrefillLast(nil, cache, 4); return err }, "empty"},
		{"prefill/no-cache", func() error { _, err := m.Prefill([]int32{1}, nil, 4); return err }, "cache"},
		{"forward/cache-count", func() error { _, err := m.Forward(ids, cache[:1], ForwardOptions{}); return err }, "caches"},
		{"forward/rank", func() error { _, err := m.Forward(flat, nil, ForwardOptions{}); return err }, "[B, L]"},
		{"forward/dtype", func() error { _, err := m.Forward(floats, nil, ForwardOptions{}); return err }, "integer"},
		{"forward/row", func() error { _, err := m.Forward(ids, nil, ForwardOptions{LogitsRows: []int{3}}); return err }, "LogitsRows[0]"},
		{"forward/no-rows", func() error { _, err := m.Forward(ids, nil, ForwardOptions{LogitsRows: []int{}}); return err }, "NoLogits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error %v, want one mentioning %q", err, c.want)
			}
			// The fixture is a llama checkpoint (model_type llama): errors said "minicpm5:"
			// (issue 19); they say "model:".
			if !strings.HasPrefix(err.Error(), "model: ") || strings.Contains(err.Error(), "minicpm5") {
				t.Errorf("error %q: want the prefix \"model: \" and no \"minicpm5\"", err)
			}
		})
	}
	if cache[0].Offset() != 0 {
		t.Errorf("cache offset after rejected calls: got %d, want 0", cache[0].Offset())
	}
}
