package kernel

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// prefixBool is the explicit Bool [l, l] mask of MaskPrefix m (broadcast
// over batches and heads).
func prefixBool(m Mask, l int) Mask {
	bm := Mask{Kind: MaskBool, Bool: make([]bool, l*l), Strides: [4]int{0, 0, l, 1}}
	for i := range l {
		for j := range l {
			bm.Bool[i*l+j], _ = m.visible(0, 0, i, j, l, l)
		}
	}
	return bm
}

// TestSDPAPrefixMask: the prefix-shared mask, which skips the blocks of
// keys it hides from every row of an item and reads no mask where a row
// sees every key up to its position, gives the bits of the same attention
// under its explicit Bool mask, on every kernel path, with both
// accumulators, 1 and 3 workers, in float32 and bfloat16; and its
// visibility is the definition (a key up to the query's position, in the
// prefix or the query's own block).
func TestSDPAPrefixMask(t *testing.T) {
	layouts := []struct {
		prefix int
		blocks []int
	}{
		{3, []int{2, 2}},
		{0, []int{40, 9}},
		{40, []int{33, 7}},    // blocks start and end inside blocks of 32 keys
		{64, []int{32, 32}},   // aligned
		{1, []int{1}},         // the smallest
		{300, []int{45, 60}},  // a second chunk of 256 keys, the boundary inside an item
		{100, []int{3, 5, 1}}, // three blocks
	}
	type shape struct{ b, h, hk, d int }
	shapes := []shape{{1, 3, 1, 16}, {2, 4, 2, 32}, {1, 9, 3, 64}, {1, 2, 2, 8}}
	for _, path := range sdpaPaths() {
		for li, lay := range layouts {
			sh := shapes[li%len(shapes)]
			m := Mask{Kind: MaskPrefix, Prefix: lay.prefix}
			at := lay.prefix
			for _, n := range lay.blocks {
				at += n
				m.Ends = append(m.Ends, at)
			}
			l := at
			for _, dt := range testDTypes[:2] {
				for _, acc := range []Acc{AccF32, AccF64} {
					name := fmt.Sprintf("%s/%s/acc%d/prefix%d%v/b%dh%dhk%dd%d", path.name, dt.name, acc, lay.prefix, lay.blocks, sh.b, sh.h, sh.hk, sh.d)
					t.Run(name, func(t *testing.T) {
						path.run(t, func() {
							r := newRand(uint64(li*10 + int(acc)))
							q := randVec(r, sh.b*sh.h*l*sh.d, 1, dt.round)
							k := randVec(r, sh.b*sh.hk*l*sh.d, 1, dt.round)
							v := randVec(r, sh.b*sh.hk*l*sh.d, 1, dt.round)
							scale := float32(1 / math.Sqrt(float64(sh.d)))
							bm := prefixBool(m, l)
							want := make([]float32, sh.b*sh.h*l*sh.d)
							SDPA(want, q, k, v, sh.b, sh.h, sh.hk, l, l, sh.d, sh.d, scale, bm, dt.round, acc)
							for _, th := range []int{1, 3} {
								got := make([]float32, len(want))
								withThreads(th, func() { SDPA(got, q, k, v, sh.b, sh.h, sh.hk, l, l, sh.d, sh.d, scale, m, dt.round, acc) })
								expectSame(t, got, want, fmt.Sprintf("prefix mask vs its Bool mask, %d workers", th))
							}
							ref, refBool := make([]float32, len(want)), make([]float32, len(want))
							SDPARef(ref, q, k, v, sh.b, sh.h, sh.hk, l, l, sh.d, sh.d, scale, m, dt.round, acc)
							SDPARef(refBool, q, k, v, sh.b, sh.h, sh.hk, l, l, sh.d, sh.d, scale, bm, dt.round, acc)
							expectSame(t, ref, refBool, "reference: prefix mask vs its Bool mask")
						})
					})
				}
			}
		}
	}

	// The visibility is the definition.
	m := Mask{Kind: MaskPrefix, Prefix: 3, Ends: []int{5, 7}}
	want := []string{"1000000", "1100000", "1110000", "1111000", "1111100", "1110010", "1110011"}
	for i, row := range want {
		got := ""
		for j := range 7 {
			ok, _ := m.visible(0, 0, i, j, 7, 7)
			got += map[bool]string{false: "0", true: "1"}[ok]
		}
		if got != row {
			t.Errorf("row %d: %s, want %s", i, got, row)
		}
	}
}

// TestSDPAPrefixMaskErrors: a prefix mask that does not describe the call
// panics with a message naming it.
func TestSDPAPrefixMaskErrors(t *testing.T) {
	cases := []struct {
		name string
		l, s int
		m    Mask
	}{
		{"queries and keys differ", 4, 5, Mask{Kind: MaskPrefix, Prefix: 2, Ends: []int{5}}},
		{"negative prefix", 5, 5, Mask{Kind: MaskPrefix, Prefix: -1, Ends: []int{5}}},
		{"prefix past the keys", 5, 5, Mask{Kind: MaskPrefix, Prefix: 6}},
		{"empty block", 5, 5, Mask{Kind: MaskPrefix, Prefix: 2, Ends: []int{2, 5}}},
		{"short blocks", 5, 5, Mask{Kind: MaskPrefix, Prefix: 2, Ends: []int{4}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.HasPrefix(msg, "kernel.SDPA: prefix mask") {
					t.Errorf("got panic %v, want a message starting %q", r, "kernel.SDPA: prefix mask")
				}
			}()
			q, k := make([]float32, c.l*8), make([]float32, c.s*8)
			SDPA(make([]float32, c.l*8), q, k, k, 1, 1, 1, c.l, c.s, 8, 8, 1, c.m, Identity, AccF32)
		})
	}
}
