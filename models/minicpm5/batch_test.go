package minicpm5

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestBatchForwardEqualsAlone: prompts of lengths 3, 7 and 1, left-padded
// into one [3, 7] batch (a BatchKVCache with left padding 4, 0, 6), then
// three decode steps of [3, 1]: on the CPU backend each row's logits equal
// those of the prompt run alone through a FullKVCache bit for bit. Every
// kernel computes a row from that row's inputs alone, and SDPA gives the
// keys the mask hides a weight of exactly 0, so the padding changes no bit.
func TestBatchForwardEqualsAlone(t *testing.T) {
	for _, dir := range checkpoints(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := newCPU(t)
			m := load(t, b, dir)
			V := m.Config().VocabSize
			lengths := []int{3, 7, 1}
			L := 7
			prompts := make([][]int32, len(lengths))
			pad := make([]int, len(lengths))
			ids := make([]int32, 0, len(lengths)*L)
			for r, n := range lengths {
				p := prompt(n+r, V)[r:]
				prompts[r], pad[r] = p, L-n
				ids = append(ids, make([]int32, L-n)...)
				ids = append(ids, p...)
			}
			cache := m.NewBatchCache(pad)
			defer func() {
				for _, c := range cache {
					c.Release()
				}
			}()
			batch := [][]float32{}
			feed := func(ids []int32, L int) {
				x := b.FromHost(tensor.FromInt32(tensor.Shape{len(lengths), L}, ids))
				logits, err := m.BatchLogits(x, cache)
				b.Release(x)
				if err != nil {
					t.Fatal(err)
				}
				if got := logits.Shape(); !got.Equal(tensor.Shape{len(lengths), 1, V}) {
					t.Fatalf("BatchLogits shape %v, want [%d 1 %d]", got, len(lengths), V)
				}
				batch = append(batch, host(t, b, logits))
				b.Release(logits)
			}
			feed(ids, L)
			next := [][]int32{{11, 12, 13}, {21, 22, 23}, {31, 32, 33}}
			for s := range 3 {
				feed([]int32{next[0][s], next[1][s], next[2][s]}, 1)
			}
			if got, want := cache[0].Offsets(), []int{6, 10, 4}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("offsets %v, want %v", got, want)
			}
			for r, p := range prompts {
				solo := m.NewCache()
				logits, err := m.PrefillLast(p, solo, 16)
				if err != nil {
					t.Fatal(err)
				}
				want := [][]float32{host(t, b, logits)}
				b.Release(logits)
				for s := range 3 {
					want = append(want, step(t, m, solo, next[r][s]))
				}
				release(solo)
				for s := range want {
					got := batch[s][r*V : (r+1)*V]
					for j := range V {
						if math.Float32bits(got[j]) != math.Float32bits(want[s][j]) {
							t.Fatalf("row %d step %d: logit %d is %v in the batch, %v alone", r, s, j, got[j], want[s][j])
						}
					}
				}
			}
		})
	}
}

// TestBatchCacheErrors: a batch whose rows do not match the cache is an
// error from Forward, not a panic.
func TestBatchCacheErrors(t *testing.T) {
	b := newCPU(t)
	m := load(t, b, fixture(t, "fp-f32"))
	cache := m.NewBatchCache([]int{0, 0})
	x := b.FromHost(tensor.FromInt32(tensor.Shape{3, 1}, []int32{1, 2, 3}))
	defer b.Release(x)
	_, err := m.Forward(x, layerCaches(cache), ForwardOptions{})
	if err == nil || !strings.Contains(err.Error(), "RoPE") {
		t.Fatalf("3 rows through a 2-row batch cache: got %v, want the RoPE offset error", err)
	}
}
