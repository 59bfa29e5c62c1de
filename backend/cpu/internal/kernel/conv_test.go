package kernel

import (
	"fmt"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// convInputs returns float32 values covering every bf16 pattern in the high
// half with low halves that matter to rounding: exact, just below and above
// the tie, the tie itself (both parities of the kept bit come from the
// high halves), the largest, and NaN payloads in the low half.
func convInputs() []float32 {
	lows := []uint32{0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234}
	out := make([]float32, 0, 65536*len(lows))
	for hi := range uint32(65536) {
		for _, lo := range lows {
			out = append(out, math.Float32frombits(hi<<16|lo))
		}
	}
	return out
}

// convPaths are the values of convAVX2 to test: false (the scalar loops),
// and true where the CPU has AVX2.
func convPaths(t *testing.T) []bool {
	if !convAVX2 {
		t.Logf("no AVX2 on this CPU: only the scalar path is tested")
		return []bool{false}
	}
	return []bool{false, true}
}

// convSpans are the ranges of the inputs to convert: the first n values
// (across the workers), then every length 0..40 at three starts (vector
// blocks and tails).
func convSpans(n int) [][2]int {
	spans := [][2]int{{0, n}}
	for l := range 41 {
		for at := range 3 {
			spans = append(spans, [2]int{1000*l + at, 1000*l + at + l})
		}
	}
	return spans
}

// TestConvBF16 holds the bulk conversions to the scalar ones bit for bit,
// for every length 0..40 at every start (vector blocks and tails) and for
// the full input set (458752 values, split across the workers), on both the
// assembly path (when the CPU has AVX2) and the scalar one.
func TestConvBF16(t *testing.T) {
	in := convInputs()
	defer func(v bool) { convAVX2 = v }(convAVX2)
	for _, avx := range convPaths(t) {
		convAVX2 = avx
		for _, sp := range convSpans(len(in)) {
			t.Run(fmt.Sprintf("avx2=%v/%d:%d", avx, sp[0], sp[1]), func(t *testing.T) {
				src := in[sp[0]:sp[1]]
				bits := make([]uint16, len(src)+1)
				Float32sToBF16(bits[:len(src)], src)
				rounded := append([]float32(nil), src...)
				RoundBF16s(rounded)
				back := make([]float32, len(src)+1)
				BF16ToFloat32s(back[:len(src)], bits)
				for i, f := range src {
					want := tensor.Float32ToBF16(f)
					if bits[i] != want {
						t.Fatalf("Float32sToBF16(%#08x): got %#04x, want %#04x (index %d)", math.Float32bits(f), bits[i], want, i)
					}
					if got, w := math.Float32bits(rounded[i]), math.Float32bits(tensor.RoundBF16(f)); got != w {
						t.Fatalf("RoundBF16s(%#08x): got %#08x, want %#08x (index %d)", math.Float32bits(f), got, w, i)
					}
					if got, w := math.Float32bits(back[i]), math.Float32bits(tensor.BF16ToFloat32(want)); got != w {
						t.Fatalf("BF16ToFloat32s(%#04x): got %#08x, want %#08x (index %d)", want, got, w, i)
					}
				}
				if bits[len(src)] != 0 || back[len(src)] != 0 {
					t.Fatalf("wrote past len(dst): %#04x, %v", bits[len(src)], back[len(src)])
				}
			})
		}
	}
}

// TestAddRound holds AddRound to the scalar float32 sum (rounded with
// tensor.RoundBF16 when asked) bit for bit: every length 0..40 at three
// starts (vector blocks and tails) and the whole input set added to itself
// shifted, which meets NaNs, infinities, overflow and ties; in place (dst
// is a) as well; on the assembly path (when the CPU has AVX2) and the
// scalar one.
func TestAddRound(t *testing.T) {
	in := convInputs()
	defer func(v bool) { convAVX2 = v }(convAVX2)
	for _, avx := range convPaths(t) {
		convAVX2 = avx
		for _, bf16 := range []bool{false, true} {
			for _, sp := range convSpans(len(in) - 7) {
				for _, inPlace := range []bool{false, true} {
					t.Run(fmt.Sprintf("avx2=%v/bf16=%v/inplace=%v/%d:%d", avx, bf16, inPlace, sp[0], sp[1]), func(t *testing.T) {
						a := append([]float32(nil), in[sp[0]:sp[1]]...)
						b := in[sp[0]+7 : sp[1]+7]
						dst := make([]float32, len(a)+1)
						out := dst[:len(a)]
						if inPlace {
							out = a
						}
						want := make([]float32, len(a))
						for i := range a {
							want[i] = a[i] + b[i]
							if bf16 {
								want[i] = tensor.RoundBF16(want[i])
							}
						}
						AddRound(out, a, b, bf16)
						for i := range want {
							if g, w := math.Float32bits(out[i]), math.Float32bits(want[i]); g != w {
								t.Fatalf("index %d: %#08x + %#08x gave %#08x, want %#08x", i, math.Float32bits(in[sp[0]+i]), math.Float32bits(b[i]), g, w)
							}
						}
						if dst[len(a)] != 0 {
							t.Fatalf("wrote past len(dst): %v", dst[len(a)])
						}
					})
				}
			}
		}
	}
}

// TestConvF16 checks the float16 conversions against the scalar ones on
// every float16 pattern and on float32 values around them.
func TestConvF16(t *testing.T) {
	h := make([]uint16, 65536)
	for i := range h {
		h[i] = uint16(i)
	}
	f := make([]float32, len(h))
	F16ToFloat32s(f, h)
	back := make([]uint16, len(h))
	Float32sToF16(back, f)
	for i := range h {
		if got, w := math.Float32bits(f[i]), math.Float32bits(tensor.F16ToFloat32(h[i])); got != w {
			t.Fatalf("F16ToFloat32s(%#04x): got %#08x, want %#08x", h[i], got, w)
		}
		// Every pattern comes back except a signaling NaN, which gets
		// its quiet bit (0x0200) set.
		want := h[i]
		if want&0x7C00 == 0x7C00 && want&0x03FF != 0 {
			want |= 0x0200
		}
		if back[i] != want {
			t.Fatalf("Float32sToF16(F16ToFloat32s(%#04x)) = %#04x, want %#04x", h[i], back[i], want)
		}
	}
	in := convInputs()
	r := append([]float32(nil), in...)
	RoundF16s(r)
	for i, x := range in {
		if got, w := math.Float32bits(r[i]), math.Float32bits(tensor.RoundF16(x)); got != w {
			t.Fatalf("RoundF16s(%#08x): got %#08x, want %#08x", math.Float32bits(x), got, w)
		}
	}
}

func BenchmarkConvBF16(b *testing.B) {
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(i) * 0.37
	}
	bits := make([]uint16, len(src))
	b.Run("Float32sToBF16", func(b *testing.B) {
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			Float32sToBF16(bits, src)
		}
	})
	b.Run("BF16ToFloat32s", func(b *testing.B) {
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			BF16ToFloat32s(src, bits)
		}
	})
	b.Run("RoundBF16s", func(b *testing.B) {
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			RoundBF16s(src)
		}
	})
}
