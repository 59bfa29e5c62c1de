//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// bfScoreBound is the bound the bfloat16 scores hold to the exact scale·q·k:
// float32 sums of d products (in pairs, then a tree of lanes) lose at most
// d roundings of the running sums' size, and the scale one more.
func bfScoreBound(q, k []float32, scale float32) float64 {
	var mag float64
	for t := range q {
		mag += math.Abs(float64(q[t]) * float64(k[t]))
	}
	return math.Abs(float64(scale)) * mag * float64(len(q)+1) * 0x1p-24
}

// TestSDPAScoresBFKernel holds sdpaScoresBF64 and sdpaScoresBF128
// (bfloat16 keys and queries) and sdpaScoresF64 and sdpaScoresF128 (float32
// keys, or float16 ones widened, and float32 queries already times the
// scale) to the exact scores
// within bfScoreBound, for one to four rows, keys at a stride wider than a
// row, and checks that the rows past rows and the floats around the output
// stay untouched.
func TestSDPAScoresBFKernel(t *testing.T) {
	for _, kind := range []string{"bf16", "f16", "f32"} {
		for _, d := range []int{64, 128} {
			for rows := 1; rows <= 4; rows++ {
				t.Run(fmt.Sprintf("%s/d%d/rows%d", kind, d, rows), func(t *testing.T) {
					skipWithoutHalfScores(t, kind)
					checkScoresKernel(t, kind, d, rows)
				})
			}
		}
	}
}

// skipWithoutHalfScores skips, saying why, where the CPU lacks what the
// fast precision's scores on 16-bit keys of kind need: AVX-512 for both,
// and AVX512_BF16 for bfloat16.
func skipWithoutHalfScores(t *testing.T, kind string) {
	t.Helper()
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the fast precision's scores on 16-bit keys do not run")
	}
	if kind == "bf16" && !asmBF16 {
		t.Skip("SKIPPED: this CPU lacks AVX512_BF16; the fast precision's bfloat16 scores do not run")
	}
}

// halfKind returns the rounding of storage kind ("bf16", "f16" or "f32")
// and the values of n elements of a KV of that kind from element off.
func halfKind(kind string) (Rounder, func(kv KV, off, n int) []float32) {
	switch kind {
	case "f16":
		return tensor.RoundF16, func(kv KV, off, n int) []float32 { return f16Row(kv.Vec.U16[off:][:n]) }
	case "f32":
		return Identity, func(kv KV, off, n int) []float32 { return kv.Vec.F32[off:][:n] }
	}
	return tensor.RoundBF16, func(kv KV, off, n int) []float32 { return bf16Row(kv.Vec.U16[off:][:n]) }
}

// checkScoresKernel runs one case of TestSDPAScoresBFKernel.
func checkScoresKernel(t *testing.T, kind string, d, rows int) {
	r := newRand(uint64(d + rows))
	round, _ := halfKind(kind)
	q := randVec(r, rows*d, 1, round)
	const stride = 8 // extra values between key rows
	k := randVec(r, sdpaBK*(d+stride), 1, round)
	scale := float32(1 / math.Sqrt(float64(d)))
	got, whole := guarded(4 * sdpaBK)
	if kind == "bf16" {
		kb := make([]uint16, len(k))
		for i, x := range k {
			kb[i] = tensor.Float32ToBF16(x)
		}
		qb := make([]uint16, len(q))
		for i, x := range q {
			qb[i] = tensor.Float32ToBF16(x)
		}
		kern := sdpaScoresBF64
		if d == 128 {
			kern = sdpaScoresBF128
		}
		kern(&got[0], &qb[0], unsafe.Pointer(&kb[0]), uintptr(2*(d+stride)), rows, scale)
	} else {
		// The kernel takes scale·q, as the job's w.qs holds it, and
		// float32 keys (float16 ones widened, as fScores leaves them).
		for i := range q {
			q[i] *= scale
		}
		scale = 1
		kern := sdpaScoresF64
		if d == 128 {
			kern = sdpaScoresF128
		}
		kern(&got[0], &q[0], unsafe.Pointer(&k[0]), uintptr(4*(d+stride)), rows)
	}
	checkGuards(t, whole, "s")
	for x := rows * sdpaBK; x < len(got); x++ {
		if !math.IsNaN(float64(got[x])) { // guarded fills with NaN
			t.Fatalf("s[%d] past the rows written: %v", x, got[x])
		}
	}
	for rr := range rows {
		for x := range sdpaBK {
			qr, kr := q[rr*d:(rr+1)*d], k[x*(d+stride):][:d]
			var exact float64
			for t := range qr {
				exact += float64(qr[t]) * float64(kr[t])
			}
			exact *= float64(scale)
			if g := got[rr*sdpaBK+x]; math.Abs(float64(g)-exact) > bfScoreBound(qr, kr, scale) {
				t.Fatalf("row %d key %d: %v, exact %v (bound %g)", rr, x, g, exact, bfScoreBound(qr, kr, scale))
			}
		}
	}
}

// TestSDPABF16Fast: SDPAKV in the fast precision (AccQ8) on bfloat16,
// float16 and float32 keys of a decode step (rep = 3 and 4, d = 64 and
// 128, lengths with a partial last block, one and two KV heads, batch 2)
// takes the untransposed scores (bfScores, fScores), stays within a bound
// of the float32 path's output, and does not give its bits (the kernel
// ran).
func TestSDPABF16Fast(t *testing.T) {
	for _, kind := range []string{"bf16", "f16", "f32"} {
		for _, d := range []int{64, 128} {
			for _, sh := range []struct{ h, hk, s int }{{3, 1, 45}, {6, 2, 96}, {8, 2, 130}, {4, 1, 7}} {
				t.Run(fmt.Sprintf("%s/d%d/h%dhk%d/s%d", kind, d, sh.h, sh.hk, sh.s), func(t *testing.T) {
					skipWithoutHalfScores(t, kind)
					round, widen := halfKind(kind)
					const B = 2
					r := newRand(uint64(d*sh.s + sh.h))
					q := randVec(r, B*sh.h*d, 1, round)
					kk := toStorage(randVec(r, B*sh.hk*sh.s*d, 1, round), kind, B, sh.hk, sh.s, d, sh.s+3, d)
					vv := toStorage(randVec(r, B*sh.hk*sh.s*d, 1, round), kind, B, sh.hk, sh.s, d, sh.s+3, d)
					scale := float32(1 / math.Sqrt(float64(d)))
					want, got := make([]float32, B*sh.h*d), make([]float32, B*sh.h*d)
					j := newSDPAJob(got, q, &kk, &vv, B, sh.h, sh.hk, 1, sh.s, d, d, scale, &Mask{}, Identity, AccQ8)
					if kind == "bf16" && !j.bfk || kind != "bf16" && !j.fk {
						t.Fatalf("the job does not take the in-place scores on %s keys", kind)
					}
					SDPAKV(want, q, kk, vv, B, sh.h, sh.hk, 1, sh.s, d, d, scale, Mask{}, Identity, AccF32)
					SDPAKV(got, q, kk, vv, B, sh.h, sh.hk, 1, sh.s, d, d, scale, Mask{}, Identity, AccQ8)
					// A score off by e moves each weight by a factor within
					// exp(±2e): the output moves by at most (e^{2e} − 1)·max|v|,
					// plus the float32 path's own rounding.
					var e, vmax float64
					for i := range B * sh.h {
						bi, hq := i/sh.h, i%sh.h
						kh := hq / (sh.h / sh.hk)
						for x := range sh.s {
							e = max(e, bfScoreBound(q[i*d:(i+1)*d], widen(kk, kk.row(bi, kh, x), d), scale))
						}
					}
					for bi := range B { // the cache's values, not the NaNs past them
						for kh := range sh.hk {
							for x := range sh.s {
								for _, y := range widen(vv, vv.row(bi, kh, x), d) {
									vmax = max(vmax, math.Abs(float64(y)))
								}
							}
						}
					}
					if math.IsNaN(vmax) || math.IsNaN(e) {
						t.Fatalf("bound from NaN values: max |v| %v, score error %v", vmax, e)
					}
					tol := math.Expm1(2*e)*vmax + 1e-5
					differ := false
					for i := range want {
						if math.Abs(float64(got[i]-want[i])) > tol {
							t.Fatalf("output %d: %v, float32 path %v (tolerance %g)", i, got[i], want[i], tol)
						}
						differ = differ || got[i] != want[i]
					}
					if !differ {
						t.Fatal("the fast precision gave the float32 path's bits: the in-place scores did not run")
					}
				})
			}
		}
	}
}

// bf16Row widens bfloat16 bits to float32 values.
func bf16Row(u []uint16) []float32 {
	out := make([]float32, len(u))
	for i, x := range u {
		out[i] = tensor.BF16ToFloat32(x)
	}
	return out
}

// f16Row widens float16 bits to float32 values.
func f16Row(u []uint16) []float32 {
	out := make([]float32, len(u))
	for i, x := range u {
		out[i] = tensor.F16ToFloat32(x)
	}
	return out
}

// TestSDPABF16Chunked: in the fast precision on bfloat16, float16 and
// float32 keys (the untransposed scores), decoding a position at a time, prefill in chunks
// and one-shot prefill give every query row the same bits, as on the
// float32 path (TestSDPAChunked): a verify window, a prompt cache's prefill
// and the decode steps after it agree.
func TestSDPABF16Chunked(t *testing.T) {
	for _, kind := range []string{"bf16", "f16", "f32"} {
		for _, sh := range []struct{ h, hk, s, d int }{{6, 2, 100, 64}, {4, 1, 70, 128}} {
			h, hk, s, d := sh.h, sh.hk, sh.s, sh.d
			round, _ := halfKind(kind)
			r := newRand(uint64(s + d))
			q := randVec(r, h*s*d, 1, round)
			kk := toStorage(randVec(r, hk*s*d, 1, round), kind, 1, hk, s, d, s+9, d)
			vv := toStorage(randVec(r, hk*s*d, 1, round), kind, 1, hk, s, d, s+9, d)
			run := func(chunk, th int) []float32 {
				return sdpaChunked(q, kk, vv, h, hk, s, d, chunk, th, 0.125, round, AccQ8)
			}
			for _, chunk := range []int{1, 4, 33} {
				for _, th := range []int{1, 2} {
					t.Run(fmt.Sprintf("%s/h%dhk%d/d%d/chunk%d/threads%d", kind, h, hk, d, chunk, th), func(t *testing.T) {
						skipWithoutHalfScores(t, kind)
						expectSame(t, run(chunk, th), run(s, 1), "chunked vs one-shot")
					})
				}
			}
		}
	}
}
