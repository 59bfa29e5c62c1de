package train

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"1000", 1000, false},
		{"4K", 4 << 10, false},
		{"512M", 512 << 20, false},
		{"3G", 3 << 30, false},
		{"2GiB", 2 << 30, false},
		{" 7MiB ", 7 << 20, false},
		{"0", 0, true},
		{"-5G", 0, true},
		{"12X", 0, true},
		{"G", 0, true},
		{"1.5G", 0, true},
		{"9999999999999G", 0, true},
		{"", 0, true},
	} {
		got, err := ParseBytes(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

// smolConfig is SmolLM2-135M's shapes.
var smolConfig = &checkpoint.Config{HiddenSize: 576, IntermediateSize: 1536, NumAttentionHeads: 9, NumKeyValueHeads: 3, HeadDim: 64, VocabSize: 49152, NumHiddenLayers: 30}

// TestSegmentLayersFor: the size chosen is the largest whose estimate
// fits: a budget of exactly size n's estimate gives n, a byte less gives
// less, and a budget below one layer's estimate is an error naming it.
func TestSegmentLayersFor(t *testing.T) {
	for _, T := range []int{512, 2048, 4096} {
		for _, n := range []int{1, 2, 7, 30} {
			t.Run(fmt.Sprintf("T%d/n%d", T, n), func(t *testing.T) {
				e := EstimateActivations(smolConfig, 30, n, 1, T, 341)
				got, ge, err := SegmentLayersFor(e.Total(), smolConfig, 30, 1, T, 341)
				if err != nil || got != n || ge != e {
					t.Fatalf("budget %d: segments of %d (%+v, %v), want %d", e.Total(), got, ge, err, n)
				}
				got, _, err = SegmentLayersFor(e.Total()-1, smolConfig, 30, 1, T, 341)
				switch {
				case n == 1 && (err == nil || !strings.Contains(err.Error(), "below the estimate for segments of one layer")):
					t.Fatalf("budget %d: segments of %d, error %v; want an error", e.Total()-1, got, err)
				case n > 1 && (err != nil || got >= n):
					t.Fatalf("budget %d: segments of %d, error %v; want fewer than %d", e.Total()-1, got, err, n)
				}
			})
		}
	}
}

// TestActivationEstimate: on the CPU backend, whose peak counts every
// array it makes, a segmented step's peak above what was live before it
// lies within the estimate, and above a quarter of it, for segment sizes
// and lengths on a tiny checkpoint.
func TestActivationEstimate(t *testing.T) {
	for _, model := range []string{"q4g64-f32", "tied-f32"} {
		for _, L := range []int{16, 64, 200} {
			for _, n := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%s/L%d/n%d", model, L, n), func(t *testing.T) {
					b, err := backend.Open("cpu", backend.Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer b.Close()
					withAdapters(t, b, model, -1, func(m *minicpm5.Model, ads []lora.Adapter) error {
						r := rand.New(rand.NewPCG(5, 6))
						toks := make([]int32, L)
						for i := range toks {
							toks[i] = int32(r.IntN(m.VocabSize()))
						}
						batch := Batch{Tokens: toks, B: 1, L: L, Lengths: [][2]int32{{1, int32(L - 1)}}}
						chunk := 24
						tr := &Trainer{B: b, Model: m, Adapters: ads, SegmentLayers: n, LossChunk: chunk}
						before := b.Stats().LiveBytes
						if _, err := gradsOf(tr, batch); err != nil {
							return err
						}
						used := b.Stats().PeakBytes - before
						e := EstimateActivations(m.Config(), len(m.Layers), n, 1, L, chunk)
						if used > e.Total() || used < e.Total()/4 {
							t.Errorf("step peak %d bytes above the live %d, estimate %d (%+v)", used, before, e.Total(), e)
						}
						t.Logf("step peak %d bytes, estimate %d (%.2f×)", used, e.Total(), float64(e.Total())/float64(used))
						return nil
					})
				})
			}
		}
	}
}
