package generate_test

import (
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
)

// TestBatchPackedWeights: eight rows decoding together on a fast CPU
// backend that packs its weights (backend.Options.PackWeights) give the
// tokens of the same batch on one that packs none (NoPackWeights; eight rows take the int8
// GEMM, whose packed panels must change no bit), and the packed copy is
// reported in Stats.PackedBytes.
func TestBatchPackedWeights(t *testing.T) {
	run := func(pack bool) ([][]int32, int64) {
		b, err := cpu.New(backend.Options{Precision: "fast", PackWeights: pack, NoPackWeights: !pack})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		m := loadTinyWith(t, b, "optiq-f32")
		var prompts [][]int32
		for i := range 8 {
			prompts = append(prompts, []int32{int32(3 + i), int32(40 + 7*i), int32(100 + 11*i), 5})
		}
		g, err := generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: 16, CompletionBatchSize: 8, PrefillBatchSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		uids, err := g.Insert(prompts, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := make([][]int32, len(prompts))
		for !g.Done() {
			toks, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range toks {
				out[slices.Index(uids, tk.UID)] = append(out[slices.Index(uids, tk.UID)], tk.Token)
			}
		}
		return out, b.Stats().PackedBytes
	}
	want, plainBytes := run(false)
	got, packedBytes := run(true)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("row %d: packed %v, unpacked %v", i, got[i], want[i])
		}
	}
	if plainBytes != 0 {
		t.Errorf("PackedBytes %d with NoPackWeights", plainBytes)
	}
	if !cpu.PackWeightsSupported() {
		t.Log("NOTE: this CPU lacks AVX-512 VNNI: nothing was packed, so the two runs took the same path")
	} else if packedBytes <= 0 {
		t.Errorf("PackedBytes %d after eight-row steps with PackWeights, want the packed copy's size", packedBytes)
	}
}
