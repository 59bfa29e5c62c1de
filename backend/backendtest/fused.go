package backendtest

import (
	"bytes"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/tensor"
)

// matmulRef multiplies the last two axes of a [..., M, K] and c [..., K, N]
// with broadcast batch axes, returning the product and each element's
// Σ|a·c|.
func matmulRef(a, c nd) (nd, []float64) {
	ra, rc := len(a.shape), len(c.shape)
	M, K, N := a.shape[ra-2], a.shape[ra-1], c.shape[rc-1]
	bs, _ := broadcastShape(a.shape[:ra-2], c.shape[:rc-2])
	shape := append(bs.Clone(), M, N)
	out := nd{shape, make([]float64, shape.Size())}
	mag := make([]float64, len(out.v))
	batch := bs.Size()
	idx := make([]int, len(bs))
	for p := range batch {
		unravel(p, bs, idx)
		ao := batchOffset(a.shape[:ra-2], idx) * M * K
		co := batchOffset(c.shape[:rc-2], idx) * K * N
		for i := range M {
			for j := range N {
				s, m := 0.0, 0.0
				for k := range K {
					x := a.v[ao+i*K+k] * c.v[co+k*N+j]
					s += x
					m += math.Abs(x)
				}
				out.v[(p*M+i)*N+j] = s
				mag[(p*M+i)*N+j] = m
			}
		}
	}
	return out, mag
}

// batchOffset is the flat batch index in shape s (right-aligned to idx,
// size-1 axes broadcast) of the broadcast batch index idx.
func batchOffset(s tensor.Shape, idx []int) int {
	off := len(idx) - len(s)
	o := 0
	for i, d := range s {
		o *= d
		if d != 1 {
			o += idx[off+i]
		}
	}
	return o
}

// Matmul with broadcast batch axes, M, N or K of 0 or 1 at times, strided
// inputs, float dtypes and a mixed pair.
func testMatmul(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, p := range [][2]tensor.DType{{tensor.F32, tensor.F32}, {tensor.F16, tensor.F16}, {tensor.BF16, tensor.BF16}, {tensor.BF16, tensor.F32}} {
			g := newGen(caseName("matmul", p[0], p[1]))
			ct := backend.PromoteTypes(p[0], p[1])
			for i := range cases {
				M, K, N := g.r.IntN(7), g.r.IntN(40), g.r.IntN(7)
				if i%4 != 0 {
					M, K, N = max(M, 1), max(K, 1), max(N, 1)
				}
				batch := g.shape(g.r.IntN(3), 1, 3)
				ba, bb := g.broadcastable(batch), g.broadcastable(batch)
				sa := append(ba.Clone(), M, K)
				sc := append(bb.Clone(), K, N)
				x, xr := g.input(b, p[0], sa, g.normal(sa.Size(), 1))
				y, yr := g.input(b, p[1], sc, g.normal(sc.Size(), 1))
				want, mag := matmulRef(xr, yr)
				compare(t, caseName(p[0], p[1], i), host(t, b, b.Matmul(x, y)), ct, want, budget(t, "matmul", ct), false, mag)
			}
		}
	})
}

// RMSNorm over the last axis, with a weight of the same or another float
// dtype (the output is their promotion) or none; a row of zeros included.
func testRMSNorm(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, p := range [][2]tensor.DType{{tensor.F32, tensor.F32}, {tensor.F16, tensor.F16}, {tensor.BF16, tensor.BF16}, {tensor.BF16, tensor.F32}, {tensor.BF16, tensor.Invalid}} {
			g := newGen(caseName("rmsnorm", p[0], p[1]))
			for i := range cases {
				shape := g.shape(1+g.r.IntN(3), 1, 5)
				shape[len(shape)-1] = 1 + g.r.IntN(70)
				n := shape[len(shape)-1]
				v := g.normal(shape.Size(), 2)
				if i%4 == 0 {
					for k := range n {
						v[k] = 0
					}
				}
				x, xr := g.input(b, p[0], shape, v)
				ct := p[0]
				var w backend.Array
				wr := nd{tensor.Shape{n}, ones(n)}
				if p[1] != tensor.Invalid {
					w, wr = g.input(b, p[1], tensor.Shape{n}, g.normal(n, 1))
					ct = backend.PromoteTypes(p[0], p[1])
				}
				const eps = 1e-5
				want := nd{shape, make([]float64, len(xr.v))}
				for r := 0; r < len(xr.v)/n; r++ {
					row := xr.v[r*n : (r+1)*n]
					ss := 0.0
					for _, x := range row {
						ss += x * x
					}
					inv := 1 / math.Sqrt(ss/float64(n)+float64(float32(eps)))
					for k, x := range row {
						want.v[r*n+k] = wr.v[k] * x * inv
					}
				}
				compare(t, caseName(p[0], p[1], i), host(t, b, b.RMSNorm(x, w, eps)), ct, want, budget(t, "rmsnorm", ct), false, nil)
			}
		}
	})
}

// RoPE on [B, H, L, D] and [B, L, D]: both pair layouts, partial rotation
// (Dims < D), base or explicit frequencies, position scale, scalar offsets
// and one offset per batch row (negative ones included, as left padding
// makes them). The bound scales with |x1| + |x2| of each rotated pair.
func testRoPE(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("rope", dt))
			for i := range 2 * cases {
				B, H, L := 1+g.r.IntN(3), 1+g.r.IntN(3), 1+g.r.IntN(5)
				D := 2 * (1 + g.r.IntN(8))
				shape := tensor.Shape{B, H, L, D}
				if i%3 == 2 {
					shape = tensor.Shape{B, L, D}
					H = 1
				}
				p := backend.RoPE{Dims: 2 * (1 + g.r.IntN(D/2)), Traditional: i%2 == 1, Base: []float32{10000, 500}[g.r.IntN(2)], Scale: []float32{1, 0.5}[g.r.IntN(2)]}
				x, xr := g.input(b, dt, shape, g.normal(shape.Size(), 1))
				half := p.Dims / 2
				inv := make([]float64, half)
				for k := range inv {
					inv[k] = math.Pow(float64(p.Base), -2*float64(k)/float64(p.Dims))
				}
				if i%4 == 3 {
					fv := make([]float64, half)
					for k := range fv {
						fv[k] = float64(float32(1 + 999*g.r.Float64()))
						inv[k] = 1 / fv[k]
					}
					p.Freqs = b.FromHost(dense(tensor.F32, tensor.Shape{half}, fv))
				}
				off := backend.Offset{Scalar: g.r.IntN(20)}
				offs := make([]int, B)
				for k := range offs {
					offs[k] = off.Scalar
				}
				if i%3 == 1 {
					ov := g.ints(B, -3, 20)
					for k := range offs {
						offs[k] = int(ov[k])
					}
					off.Rows = b.FromHost(dense(tensor.I32, tensor.Shape{B}, ov))
				}
				want := nd{shape, append([]float64{}, xr.v...)}
				mag := make([]float64, len(want.v))
				for bi := range B {
					for h := range H {
						for l := range L {
							row := ((bi*H+h)*L + l) * D
							pos := float64(p.Scale) * float64(l+offs[bi])
							for k := range half {
								i1, i2 := row+k, row+k+half
								if p.Traditional {
									i1, i2 = row+2*k, row+2*k+1
								}
								th := pos * inv[k]
								x1, x2 := xr.v[i1], xr.v[i2]
								want.v[i1] = x1*math.Cos(th) - x2*math.Sin(th)
								want.v[i2] = x1*math.Sin(th) + x2*math.Cos(th)
								mag[i1] = math.Abs(x1) + math.Abs(x2)
								mag[i2] = mag[i1]
							}
						}
					}
				}
				compare(t, caseName(dt, i), host(t, b, b.RoPE(x, p, off)), dt, want, budget(t, "rope", dt), false, mag)
			}
		}
	})
}

// ScaledDotProductAttention with grouped KV heads, no mask, the causal mask
// (lower-right aligned: query i of L sees key j of S iff j <= i + S - L), a
// Bool mask and an additive float mask (with -Inf entries), each broadcast
// from [L, S] or [B, 1, L, S]. Every query keeps at least one key. The
// bound scales with the largest |v| of the head.
func testSDPA(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("sdpa", dt))
			for i := range 2 * cases {
				B, Hk, L := 1+g.r.IntN(2), 1+g.r.IntN(2), 1+g.r.IntN(5)
				H := Hk * (1 + g.r.IntN(3))
				S := L + g.r.IntN(6)
				D, Dv := 1+g.r.IntN(16), 1+g.r.IntN(16)
				if i%2 == 0 {
					Dv = D
				}
				q, qr := g.input(b, dt, tensor.Shape{B, H, L, D}, g.normal(B*H*L*D, 1))
				k, kr := g.input(b, dt, tensor.Shape{B, Hk, S, D}, g.normal(B*Hk*S*D, 1))
				v, vr := g.input(b, dt, tensor.Shape{B, Hk, S, Dv}, g.normal(B*Hk*S*Dv, 1))
				scale := float32(1 / math.Sqrt(float64(D)))
				// bias(bi, i, j) is what the mask adds to a score (-Inf: not attended).
				bias := func(bi, i, j int) float64 { return 0 }
				var mask backend.Mask = backend.NoMask{}
				switch i % 4 {
				case 1:
					mask = backend.CausalMask{}
					bias = func(bi, i, j int) float64 {
						if j <= i+S-L {
							return 0
						}
						return math.Inf(-1)
					}
				case 2, 3:
					perBatch := g.r.IntN(2) == 0
					ms := tensor.Shape{L, S}
					nb := 1
					if perBatch {
						ms, nb = tensor.Shape{B, 1, L, S}, B
					}
					mv := make([]float64, ms.Size())
					for r := 0; r < nb*L; r++ {
						keep := g.r.IntN(S)
						for j := range S {
							if i%4 == 2 {
								if j == keep || g.r.IntN(2) == 0 {
									mv[r*S+j] = 1
								}
							} else {
								mv[r*S+j] = g.r.NormFloat64()
								if j != keep && g.r.IntN(3) == 0 {
									mv[r*S+j] = math.Inf(-1)
								}
							}
						}
					}
					mdt := tensor.Bool
					if i%4 == 3 {
						mdt = dt
					}
					ma, mr := g.input(b, mdt, ms, mv)
					mask = backend.ArrayMask{A: ma}
					bias = func(bi, i, j int) float64 {
						if !perBatch {
							bi = 0
						}
						m := mr.v[(bi*L+i)*S+j]
						if mdt == tensor.Bool {
							if m != 0 {
								return 0
							}
							return math.Inf(-1)
						}
						return m
					}
				}
				want, mag := sdpaWant(qr, kr, vr, scale, bias)
				compare(t, caseName(dt, i, mask), host(t, b, b.ScaledDotProductAttention(q, k, v, scale, mask)), dt, want, budget(t, "sdpa", dt), false, mag)
			}
		}
	})
}

// backend.AttendRows (rows of q with keys and values of their own, of
// different lengths: a batch of per-row KV caches; through the backend's
// RowAttention where it has one) gives each row, value for value, what
// ScaledDotProductAttention gives that row alone, and so is held to the
// float64 reference within testSDPA's budget; under NoMask and CausalMask
// (each row's causal offset its own length).
func testAttendRows(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("attend-rows", dt))
			for i := range cases {
				B, Hk, L := 2+g.r.IntN(3), 1+g.r.IntN(2), 1+g.r.IntN(3)
				H := Hk * (1 + g.r.IntN(3))
				D := 1 + g.r.IntN(16)
				scale := float32(1 / math.Sqrt(float64(D)))
				var mask backend.Mask = backend.NoMask{}
				if i%2 == 1 {
					mask = backend.CausalMask{}
				}
				q, qr := g.input(b, dt, tensor.Shape{B, H, L, D}, g.normal(B*H*L*D, 1))
				keys, values := make([]backend.Array, B), make([]backend.Array, B)
				alone := make([]backend.Array, B)
				for r := range B {
					S := L + g.r.IntN(40)
					k, kr := g.input(b, dt, tensor.Shape{1, Hk, S, D}, g.normal(Hk*S*D, 1))
					v, vr := g.input(b, dt, tensor.Shape{1, Hk, S, D}, g.normal(Hk*S*D, 1))
					keys[r], values[r] = k, v
					qrow := nd{tensor.Shape{1, H, L, D}, qr.v[r*H*L*D : (r+1)*H*L*D]}
					bias := func(bi, i, j int) float64 {
						if _, causal := mask.(backend.CausalMask); causal && j > i+S-L {
							return math.Inf(-1)
						}
						return 0
					}
					want, mag := sdpaWant(qrow, kr, vr, scale, bias)
					qa := b.Slice(q, []int{r, 0, 0, 0}, []int{r + 1, H, L, D})
					alone[r] = b.ScaledDotProductAttention(qa, k, v, scale, mask)
					compare(t, caseName(dt, i, mask, "row", r, "alone"), host(t, b, alone[r]), dt, want, budget(t, "sdpa", dt), false, mag)
				}
				got := host(t, b, backend.AttendRows(b, q, keys, values, scale, mask))
				if got == nil {
					continue
				}
				rows := host(t, b, b.Concatenate(0, alone...))
				if rows == nil {
					continue
				}
				compare(t, caseName(dt, i, mask, "rows"), got, dt, nd{rows.Shape, rows.ToFloat64()}, conformance.Budget{Exact: true}, true, nil)
			}
		}
	})
}

// ScaledDotProductAttention under a PrefixMask (a prefix-shared sequence:
// each block sees the prefix and itself causally) and under the
// equivalent Bool ArrayMask (PrefixMask.Dense) is held to the float64
// reference within testSDPA's budget (a backend may compute the blocked
// form in another order: MLX as causal attentions per block), the same
// bits with and without the mask's array A; layouts long enough to span several blocks of keys, blocks
// that start inside one, and no prefix. A PrefixMask of the wrong length
// is an *OpError.
func testSDPAPrefix(t *testing.T, b backend.Backend) {
	layouts := []backend.PrefixMask{
		{Prefix: 3, Blocks: []int{2, 2}},
		{Prefix: 0, Blocks: []int{5, 4}},
		{Prefix: 40, Blocks: []int{33, 7}},
		{Prefix: 64, Blocks: []int{32, 32}},
		{Prefix: 200, Blocks: []int{45, 60, 1}},
	}
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("sdpa-prefix", dt))
			for i, pm := range layouts {
				T := pm.Len()
				B, Hk := 1+g.r.IntN(2), 1+g.r.IntN(2)
				H := Hk * (1 + g.r.IntN(3))
				D := []int{8, 16, 64}[i%3]
				q, qr := g.input(b, dt, tensor.Shape{B, H, T, D}, g.normal(B*H*T*D, 1))
				k, kr := g.input(b, dt, tensor.Shape{B, Hk, T, D}, g.normal(B*Hk*T*D, 1))
				v, vr := g.input(b, dt, tensor.Shape{B, Hk, T, D}, g.normal(B*Hk*T*D, 1))
				scale := float32(1 / math.Sqrt(float64(D)))
				ma := b.FromHost(pm.Dense())
				want, mag := sdpaWant(qr, kr, vr, scale, func(_, i, j int) float64 {
					if pm.Visible(i, j) {
						return 0
					}
					return math.Inf(-1)
				})
				dense := host(t, b, b.ScaledDotProductAttention(q, k, v, scale, backend.ArrayMask{A: ma}))
				compare(t, caseName(dt, i, "array mask"), dense, dt, want, budget(t, "sdpa", dt), false, mag)
				withA := pm
				withA.A = ma
				var first *tensor.Dense
				for _, m := range []backend.PrefixMask{pm, withA} {
					got := host(t, b, b.ScaledDotProductAttention(q, k, v, scale, m))
					compare(t, caseName(dt, i, "prefix mask"), got, dt, want, budget(t, "sdpa", dt), false, mag)
					if first == nil {
						first = got
					} else if got == nil || !bytes.Equal(got.Data, first.Data) {
						t.Errorf("%s: the prefix mask gives other bits with its array A than without", caseName(dt, i))
					}
				}
				bad := backend.PrefixMask{Prefix: pm.Prefix + 1, Blocks: pm.Blocks}
				wantOpError(t, caseName(dt, i, "long prefix mask"), func() { b.ScaledDotProductAttention(q, k, v, scale, bad) })
			}
		}
	})
}

// SwiGLU: silu(gate)·up elementwise.
func testSwiGLU(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("swiglu", dt))
			// One shape per dtype: MLX compiles the kernel for each shape,
			// with the system's C++ compiler on its CPU device (~3 s).
			for i := range cases / 2 {
				shape := tensor.Shape{2, 5, 7}
				gv := g.normal(shape.Size(), 3)
				for k := range gv {
					// MLX's float16 sigmoid overflows exp(|gate|) beyond
					// |gate| = 11.09 and gives 0 where σ is ~1e-5; the
					// contract leaves such gates out.
					gv[k] = max(-10, min(10, gv[k]))
				}
				x, xr := g.input(b, dt, shape, gv)
				y, yr := g.input(b, dt, shape, g.normal(shape.Size(), 2))
				want := mapN(func(a []float64) float64 { return a[0] * sigmoid(a[0]) * a[1] }, xr, yr)
				// m = |gate·up|·2^-14: the steps are rounded to the dtype, and
				// in float16 a sigmoid below 2^-14 is subnormal.
				mag := mapN(func(a []float64) float64 { return math.Abs(a[0]*a[1]) * 0x1p-14 }, xr, yr).v
				compare(t, caseName(dt, i), host(t, b, b.SwiGLU(x, y)), dt, want, budget(t, "swiglu", dt), false, mag)
			}
		}
	})
}

// sdpaWant is attention in float64: q [B, H, L, D], k [B, Hk, S, D], v
// [B, Hk, S, Dv], bias(b, i, j) added to query i's score of key j (-Inf:
// not attended); mag is each output's scale for the budget, the largest
// |v| its head reads.
func sdpaWant(qr, kr, vr nd, scale float32, bias func(bi, i, j int) float64) (want nd, mag []float64) {
	B, H, L, D := qr.shape[0], qr.shape[1], qr.shape[2], qr.shape[3]
	Hk, S, Dv := vr.shape[1], vr.shape[2], vr.shape[3]
	want = nd{tensor.Shape{B, H, L, Dv}, make([]float64, B*H*L*Dv)}
	mag = make([]float64, len(want.v))
	sc := make([]float64, S)
	for bi := range B {
		for h := range H {
			kh := h / (H / Hk)
			vmax := 0.0
			for j := range S * Dv {
				vmax = math.Max(vmax, math.Abs(vr.v[(bi*Hk+kh)*S*Dv+j]))
			}
			for qi := range L {
				m := math.Inf(-1)
				for j := range S {
					s := 0.0
					for d := range D {
						s += qr.v[((bi*H+h)*L+qi)*D+d] * kr.v[((bi*Hk+kh)*S+j)*D+d]
					}
					sc[j] = s*float64(scale) + bias(bi, qi, j)
					m = math.Max(m, sc[j])
				}
				sum := 0.0
				for j := range S {
					sc[j] = math.Exp(sc[j] - m)
					sum += sc[j]
				}
				for d := range Dv {
					o := 0.0
					for j := range S {
						o += sc[j] / sum * vr.v[((bi*Hk+kh)*S+j)*Dv+d]
					}
					at := ((bi*H+h)*L+qi)*Dv + d
					want.v[at], mag[at] = o, vmax
				}
			}
		}
	}
	return want, mag
}
