//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/tensor"
)

func needSDPAAsm(t *testing.T) {
	t.Helper()
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the SDPA assembly kernels cannot run")
	}
}

// sdpaExpInputs is every bfloat16 bit pattern as a float32 (NaNs,
// infinities, subnormals, both zeros), the ±88 cut-offs and their
// neighbours, points where x·log2(e) is half an integer, random float32 bit
// patterns and random values in [−90, 90] and in the softmax range
// [−30, 0]; a multiple of 16 long.
func sdpaExpInputs() []float32 {
	xs := make([]float32, 0, 1<<16+3<<17+64)
	for b := range 1 << 16 {
		xs = append(xs, math.Float32frombits(uint32(b)<<16))
	}
	for _, v := range []float32{88, -88, 0, -1, 0.5 / 1.442695, -0.5 / 1.442695, -87.5, -87.9} {
		xs = append(xs, v, math.Nextafter32(v, 100), math.Nextafter32(v, -100))
	}
	for n := -126; n <= 126; n++ {
		xs = append(xs, (float32(n)+0.5)/1.442695)
	}
	r := newRand(5)
	for range 1 << 17 {
		xs = append(xs, math.Float32frombits(r.Uint32()), float32(r.Float64()*180-90), float32(-30*r.Float64()))
	}
	for len(xs)%16 != 0 {
		xs = append(xs, 1)
	}
	return xs
}

// TestSDPAExpBitExact holds the exp of the SDPA kernels to mlxmath.Exp bit
// for bit.
func TestSDPAExpBitExact(t *testing.T) {
	needSDPAAsm(t)
	xs := sdpaExpInputs()
	got := make([]float32, len(xs))
	sdpaExp(&got[0], &xs[0], len(xs))
	for i, x := range xs {
		want := mlxmath.Exp(x)
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("exp(%v = %#08x): got %v (%#08x), want %v (%#08x) (index %d)", x, math.Float32bits(x), got[i], math.Float32bits(got[i]), want, math.Float32bits(want), i)
		}
	}
}

// TestSDPASoftmaxKernel holds sdpaSoftmax to sdpaSoftmaxGo: the same maxima,
// factors and weights bit for bit (the same operations per lane), and sums
// within the rounding of their different orders (32 terms: 2·32·2^-24
// relative, plus the old sum's product).
func TestSDPASoftmaxKernel(t *testing.T) {
	needSDPAAsm(t)
	for _, rows := range []int{64, 19} {
		t.Run(fmt.Sprint(rows), func(t *testing.T) { testSDPASoftmaxKernel(t, rows) })
	}
}

func testSDPASoftmaxKernel(t *testing.T, rows int) {
	r := newRand(17)
	ninf := float32(math.Inf(-1))
	// The kernel may use the rows up to the next multiple of 16; one more
	// group of sentinels after them must stay untouched.
	pad := (rows+15)&^15 + 16
	s, sw := guarded(pad * sdpaBK)
	m, mw := guarded(pad)
	l, lw := guarded(pad)
	f, fw := guarded(pad)
	s, m, l, f = s[:(pad-16)*sdpaBK], m[:pad-16], l[:pad-16], f[:pad-16]
	for i := range s[:rows*sdpaBK] {
		s[i] = float32(r.NormFloat64() * 8)
		if r.IntN(6) == 0 {
			s[i] = ninf
		}
	}
	for x := range rows {
		switch x % 4 {
		case 0: // a fresh state
			m[x], l[x] = ninf, 0
		case 1: // a running state below, above or equal to this block's max
			m[x], l[x] = float32(r.NormFloat64()*8), float32(r.Float64()*10)
		case 2: // every score masked, fresh and running
			for j := range sdpaBK {
				s[x*sdpaBK+j] = ninf
			}
			m[x], l[x] = ninf, 0
			if x%8 == 6 {
				m[x], l[x] = 3, 2
			}
		case 3: // scores 100 below the running max: weights and factors underflow to 0
			m[x], l[x] = 120, 1
		}
	}
	s2, m2, l2, f2 := append([]float32(nil), s[:rows*sdpaBK]...), append([]float32(nil), m[:rows]...), append([]float32(nil), l[:rows]...), make([]float32, rows)
	sdpaSoftmax(&s[0], &m[0], &l[0], &f[0], rows)
	sdpaSoftmaxGo(s2, m2, l2, f2)
	for x := range rows {
		if math.Float32bits(m[x]) != math.Float32bits(m2[x]) || math.Float32bits(f[x]) != math.Float32bits(f2[x]) {
			t.Fatalf("row %d: got m %v f %v, want m %v f %v", x, m[x], f[x], m2[x], f2[x])
		}
		expectSame(t, s[x*sdpaBK:(x+1)*sdpaBK], s2[x*sdpaBK:(x+1)*sdpaBK], fmt.Sprintf("weights of row %d", x))
		if d := math.Abs(float64(l[x] - l2[x])); d > 66*math.Ldexp(1, -24)*float64(l2[x]) {
			t.Errorf("row %d: got sum %v, want %v ± 66·2^-24 relative", x, l[x], l2[x])
		}
	}
	for _, g := range []struct {
		name  string
		whole []float32
		n     int // elements the kernel may write
	}{{"s", sw, (pad - 16) * sdpaBK}, {"m", mw, pad - 16}, {"l", lw, pad - 16}, {"f", fw, pad - 16}} {
		for i, v := range g.whole[guardN+g.n:] {
			if math.Float32bits(v) != math.Float32bits(sentinel) {
				t.Fatalf("%s: element %d past the padded rows was overwritten", g.name, g.n+i)
			}
		}
	}
}

// TestSDPAPVKernels: sdpaPV4 gives each of its rows the bits sdpaPV1 gives
// that row alone (what keeps a row's result independent of its item), and
// both agree with the portable sdpaPVGo within the rounding of n fused
// against unfused products.
func TestSDPAPVKernels(t *testing.T) {
	needSDPAAsm(t)
	for _, dv := range []int{16, 48, 64, 128, 144} {
		for _, n := range []int{0, 1, 17, 32} {
			t.Run(fmt.Sprintf("dv%d/n%d", dv, n), func(t *testing.T) {
				r := newRand(uint64(dv*100 + n))
				const vstride = 3 // V rows dv+3 floats apart
				v := randVec(r, sdpaBK*(dv+vstride), 1, Identity)
				p := randVec(r, 4*sdpaBK, 1, Identity)
				acc := randVec(r, 4*dv, 1, Identity)
				f := []float32{0.5, 1, 0.25, 0.9}
				four := append([]float32(nil), acc...)
				sdpaPV4(&four[0], &p[0], unsafe.Pointer(&v[0]), uintptr(4*(dv+vstride)), &f[0], n, dv)
				for row := range 4 {
					one := append([]float32(nil), acc[row*dv:(row+1)*dv]...)
					sdpaPV1(&one[0], &p[row*sdpaBK], unsafe.Pointer(&v[0]), uintptr(4*(dv+vstride)), &f[row], n, dv)
					expectSame(t, four[row*dv:(row+1)*dv], one, fmt.Sprintf("sdpaPV4 vs sdpaPV1, row %d", row))
					goAcc := append([]float32(nil), acc[row*dv:(row+1)*dv]...)
					sdpaPVGo(goAcc, p[row*sdpaBK:row*sdpaBK+n], f[row], func(x int) []float32 { return v[x*(dv+vstride):][:dv] })
					for c := range dv {
						var mag float64 = math.Abs(float64(acc[row*dv+c] * f[row]))
						for x := range n {
							mag += math.Abs(float64(p[row*sdpaBK+x] * v[x*(dv+vstride)+c]))
						}
						if e := math.Abs(float64(one[c] - goAcc[c])); e > 2*float64(n+2)*math.Ldexp(1, -24)*mag {
							t.Fatalf("row %d dim %d: got %v, portable %v", row, c, one[c], goAcc[c])
						}
					}
				}
			})
		}
	}
}

// TestSDPAPV3Kernels: the three-row accumulations (float32, float16 and
// bfloat16 values) give each row the bits of the one-row kernel on the
// same storage, and write nothing past the third row.
func TestSDPAPV3Kernels(t *testing.T) {
	needSDPAAsm(t)
	for _, kind := range []int{sdpaF32, sdpaBF16, sdpaF16} {
		for _, dv := range []int{16, 48, 64, 128, 144} {
			for _, n := range []int{0, 1, 17, 32} {
				t.Run(fmt.Sprintf("kind%d/dv%d/n%d", kind, dv, n), func(t *testing.T) {
					r := newRand(uint64(dv*100 + n + 7*kind))
					const pad = 3 // V rows dv+3 values apart
					v := randVec(r, sdpaBK*(dv+pad), 1, tensor.RoundBF16)
					var vp unsafe.Pointer
					vstride := uintptr(4 * (dv + pad))
					switch kind {
					case sdpaF32:
						vp = unsafe.Pointer(&v[0])
					default:
						h := make([]uint16, len(v))
						for i, x := range v {
							if kind == sdpaBF16 {
								h[i] = tensor.Float32ToBF16(x)
							} else {
								h[i] = tensor.Float32ToF16(x)
							}
						}
						vp, vstride = unsafe.Pointer(&h[0]), uintptr(2*(dv+pad))
					}
					p := randVec(r, 3*sdpaBK, 1, Identity)
					acc := randVec(r, 3*dv, 1, Identity)
					f := []float32{0.5, 1, 0.25}
					three, whole := guarded(3 * dv)
					copy(three, acc)
					sdpaPV512(3, kind, &three[0], &p[0], vp, vstride, &f[0], n, dv)
					checkGuards(t, whole, "acc")
					for row := range 3 {
						one := append([]float32(nil), acc[row*dv:(row+1)*dv]...)
						sdpaPV512(1, kind, &one[0], &p[row*sdpaBK], vp, vstride, &f[row], n, dv)
						expectSame(t, three[row*dv:(row+1)*dv], one, fmt.Sprintf("three rows vs one, row %d", row))
					}
				})
			}
		}
	}
}

// TestSDPAKTKernel: sdpaKT transposes and converts exactly, at head
// dimensions that take bfloat16's 32-value loop (a multiple of 32) and
// that do not.
func TestSDPAKTKernel(t *testing.T) {
	needSDPAAsm(t)
	for _, d := range []int{16, 48, 64, 96, 128} {
		t.Run(fmt.Sprint("d", d), func(t *testing.T) { testSDPAKT(t, d) })
	}
}

func testSDPAKT(t *testing.T, d int) {
	stride := d + 5
	r := newRand(4)
	src := randVec(r, 16*stride, 1, Identity)
	bf := make([]uint16, 16*stride)
	for i, x := range src {
		bf[i] = uint16(math.Float32bits(x) >> 16)
	}
	for _, kind := range []int{sdpaF32, sdpaBF16, sdpaF16} {
		vec := F32Vec(src)
		ptr := unsafe.Pointer(&src[0])
		es := uintptr(4)
		switch kind {
		case sdpaBF16:
			vec, ptr, es = BF16Vec(bf), unsafe.Pointer(&bf[0]), 2
		case sdpaF16:
			vec, ptr, es = F16Vec(bf), unsafe.Pointer(&bf[0]), 2
		}
		dst := make([]float32, d*sdpaBK)
		sdpaKT(&dst[0], ptr, uintptr(stride)*es, d, kind)
		cvt := make([]float32, 16*d)
		sdpaCvt(&cvt[0], d, ptr, uintptr(stride)*es, 16, d, kind)
		for row := range 16 {
			for c := range d {
				want := vec.At(row*stride + c)
				if g := dst[c*sdpaBK+row]; math.Float32bits(g) != math.Float32bits(want) && !(g != g && want != want) {
					t.Fatalf("kind %d: kt[%d][%d] = %v, want %v", kind, c, row, g, want)
				}
				if g := cvt[row*d+c]; math.Float32bits(g) != math.Float32bits(want) && !(g != g && want != want) {
					t.Fatalf("kind %d: cvt[%d][%d] = %v, want %v", kind, row, c, g, want)
				}
			}
		}
	}
}

// TestSDPAOutKernels: sdpaOut is x/l (rounded with tensor.RoundBF16) and
// sdpaScale is scale·x, bit for bit, on the exp test inputs (NaNs,
// infinities, subnormals, random bit patterns).
func TestSDPAOutKernels(t *testing.T) {
	needSDPAAsm(t)
	xs := sdpaExpInputs()
	got := make([]float32, len(xs))
	for _, l := range []float32{1, 3, 0.7, 1e-30, float32(math.Inf(1)), 0} {
		for bf16 := range 2 {
			sdpaOut(&got[0], &xs[0], l, len(xs), bf16)
			for i, x := range xs {
				want := x / l
				if bf16 == 1 {
					want = tensor.RoundBF16(want)
				}
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("sdpaOut(%v / %v, bf16 %d): got %#08x, want %#08x (index %d)", x, l, bf16, math.Float32bits(got[i]), math.Float32bits(want), i)
				}
			}
		}
		sdpaScale(&got[0], &xs[0], l, len(xs))
		for i, x := range xs {
			if want := l * x; math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
				t.Fatalf("sdpaScale(%v · %v): got %#08x, want %#08x (index %d)", l, x, math.Float32bits(got[i]), math.Float32bits(want), i)
			}
		}
	}
}
