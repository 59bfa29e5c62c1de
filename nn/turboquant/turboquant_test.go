package turboquant

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestParseScheme(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Scheme
		err  string
	}{
		{"turbo", Scheme{8, 3}, ""},
		{"turbo:k8v3", Scheme{8, 3}, ""},
		{"turbo:k4v2", Scheme{4, 2}, ""},
		{"turbo:k2v5", Scheme{2, 5}, ""},
		{"turbo:k5v8", Scheme{5, 8}, ""},
		{"turbo:k3v3", Scheme{}, "key bits 3: want one of [2 4 5 8]"},
		{"turbo:k8v6", Scheme{}, "value bits 6: want one of [2 3 4 5 8]"},
		{"turbo:k8v1", Scheme{}, "value bits 1"},
		{"turbo:8,3", Scheme{}, "want turbo or turbo:k<K>v<V>"},
		{"turbo:k8v", Scheme{}, "want turbo or turbo:k<K>v<V>"},
		{"turbo:kxv3", Scheme{}, "want turbo or turbo:k<K>v<V>"},
		{"turbox", Scheme{}, "want turbo or turbo:k<K>v<V>"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseScheme(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || got.String() != "turbo:k"+string(rune('0'+tc.want.KBits))+"v"+string(rune('0'+tc.want.VBits)) {
				t.Fatalf("got %v (%s), %v; want %v", got, got, err, tc.want)
			}
		})
	}
}

func TestCheckHeadDim(t *testing.T) {
	for _, d := range []int{32, 96, 100, 1024} {
		if err := Default.Check(d); err == nil || !strings.Contains(err.Error(), "head_dim") {
			t.Errorf("head_dim %d: got %v, want an error naming head_dim", d, err)
		}
	}
	for _, d := range HeadDims {
		if err := Default.Check(d); err != nil {
			t.Errorf("head_dim %d: %v", d, err)
		}
	}
}

// TestBytesPerTokenHead: the seed's figure, 200 bytes for k8v3 at head_dim
// 128 (2.56x less than bf16 K+V), and the packed widths.
func TestBytesPerTokenHead(t *testing.T) {
	for _, tc := range []struct {
		s       Scheme
		d, want int
	}{
		{Scheme{8, 3}, 128, 128 + 8 + 8 + 48 + 8},
		{Scheme{8, 3}, 64, 64 + 4 + 4 + 24 + 4},
		{Scheme{4, 2}, 128, 64 + 8 + 8 + 32 + 8},
		{Scheme{5, 8}, 64, 40 + 4 + 4 + 64 + 4},
	} {
		if got := tc.s.BytesPerTokenHead(tc.d); got != tc.want {
			t.Errorf("%s d%d: got %d, want %d", tc.s, tc.d, got, tc.want)
		}
	}
}

// TestPack checks the little-endian layout on hand-computed bytes and the
// round trip on random codes of every width.
func TestPack(t *testing.T) {
	for _, tc := range []struct {
		bits  int
		codes []byte
		want  []byte
	}{
		{2, []byte{1, 2, 3, 0}, []byte{0x39}},
		{4, []byte{1, 2, 15, 0}, []byte{0x21, 0x0f}},
		{3, []byte{1, 2, 3, 4, 5, 6, 7, 0}, []byte{0xd1, 0x58, 0x1f}},
		{5, []byte{31, 0, 0, 0, 0, 0, 0, 1}, []byte{0x1f, 0, 0, 0, 0x08}},
	} {
		got := make([]byte, len(tc.codes)*tc.bits/8)
		Pack(tc.codes, tc.bits, got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d bits %v: got % x, want % x", tc.bits, tc.codes, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	// 128 codes (Unpack's words of eight codes), and lengths with a tail
	// of fewer than eight (read code by code).
	for _, tc := range []struct{ bits, n int }{{2, 128}, {3, 128}, {4, 128}, {5, 128}, {8, 128}, {2, 132}, {4, 130}, {4, 14}} {
		codes := make([]byte, tc.n)
		for i := range codes {
			codes[i] = byte(r.IntN(1 << tc.bits))
		}
		packed := make([]byte, tc.n*tc.bits/8)
		Pack(codes, tc.bits, packed)
		back := make([]byte, tc.n)
		Unpack(packed, tc.bits, back)
		if !slices.Equal(back, codes) {
			t.Errorf("%d bits, %d codes: round trip changed the codes", tc.bits, tc.n)
		}
	}
}

// TestRotate: the rotation is orthonormal, so Unrotate undoes it to float32
// rounding and keeps the norm.
func TestRotate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range HeadDims {
		x := make([]float32, d)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		y := slices.Clone(x)
		Rotate(y)
		var nx, ny float64
		for i := range x {
			nx += float64(x[i]) * float64(x[i])
			ny += float64(y[i]) * float64(y[i])
		}
		if math.Abs(nx-ny) > 1e-4*nx {
			t.Errorf("d%d: norm² %g after rotation, %g before", d, ny, nx)
		}
		Unrotate(y)
		for i := range x {
			if math.Abs(float64(y[i]-x[i])) > 1e-5 {
				t.Fatalf("d%d: element %d: %g after the round trip, want %g", d, i, y[i], x[i])
			}
		}
	}
}

// TestConstantGroup: the seed's preserved defect. A constant key group has
// scale 0; its zero point m/1e-8 is finite in float16 for |m| up to about
// 6.5e-4 (the group decodes to 0) and overflows beyond (the group decodes
// to NaN); an all-zero group decodes to 0.
func TestConstantGroup(t *testing.T) {
	for _, tc := range []struct {
		m   float32
		nan bool
	}{{0, false}, {1e-4, false}, {-1e-4, false}, {0.01, true}, {-3, true}} {
		for _, bits := range KeyBits {
			x := make([]float32, 64)
			for i := range x {
				x[i] = float32(i) / 10
			}
			for i := range 32 {
				x[i] = tc.m
			}
			codes := make([]byte, 64)
			s, z := make([]uint16, 2), make([]uint16, 2)
			EncodeKeys(x, bits, codes, s, z)
			out := make([]float32, 64)
			DecodeKeys(codes, bits, s, z, out)
			for i := range 32 {
				if got := math.IsNaN(float64(out[i])); got != tc.nan || (!got && out[i] != 0) {
					t.Fatalf("m %g, %d bits: element %d decodes to %g, want NaN %v (0 otherwise)", tc.m, bits, i, out[i], tc.nan)
				}
			}
			for i := 32; i < 64; i++ {
				if e := math.Abs(float64(out[i] - x[i])); math.IsNaN(e) || e > 3.2/float64(int(1)<<bits-1) {
					t.Fatalf("m %g, %d bits: element %d decodes to %g, want %g", tc.m, bits, i, out[i], x[i])
				}
			}
		}
	}
}

// TestValueError: decoded values stay within the codebook's quantization
// error (relative to the row's norm) for every width.
func TestValueError(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	prev := math.Inf(1)
	for _, bits := range ValueBits {
		var num, den float64
		for range 64 {
			x := make([]float32, 128)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			codes := make([]byte, 128)
			s := make([]uint16, 4)
			EncodeValues(x, bits, codes, s)
			out := make([]float32, 128)
			DecodeValues(codes, bits, s, out)
			for i := range x {
				num += float64(out[i]-x[i]) * float64(out[i]-x[i])
				den += float64(x[i]) * float64(x[i])
			}
		}
		rel := num / den
		if rel >= prev || rel > 0.15 {
			t.Errorf("%d bits: relative squared error %.4g (previous width %.4g)", bits, rel, prev)
		}
		prev = rel
	}
}
