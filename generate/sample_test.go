package generate

import (
	"fmt"
	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// The reference values come from MLX and mlx_lm's sample_utils at test time
// (oracle_test.go): rows are exchanged as raw bit patterns, so every
// comparison is exact.
const sampleScript = `
import json, math, numpy as np, mlx.core as mx
from mlx_lm.sample_utils import apply_top_p, apply_min_p, apply_top_k, make_sampler

def bits(a):
    if a.dtype == mx.bfloat16 or a.dtype == mx.float16:
        return a.view(mx.uint16).reshape(-1).tolist()
    return a.view(mx.uint32).reshape(-1).tolist()

rng = np.random.default_rng(7)
rows = {}
for name, dt, scale in [("bf16", mx.bfloat16, 3.0), ("bf16flat", mx.bfloat16, 0.5), ("f16", mx.float16, 3.0), ("f32", mx.float32, 3.0)]:
    logits = mx.array(rng.standard_normal(1000).astype(np.float32) * scale).astype(dt)[None]
    rows[name] = logits - mx.logsumexp(logits, keepdims=True)
perm = rng.permutation(64)
rows["distinct"] = mx.array((-perm / 16.0).astype(np.float32)).astype(mx.bfloat16)[None]
out = {"rows": {k: {"dtype": str(v.dtype).split(".")[-1], "bits": bits(v)} for k, v in rows.items()}}

xs = np.concatenate([np.linspace(-100, 100, 20001), rng.standard_normal(5000) * 30, [0.0, -0.0, 88.0, -88.0, 88.5, -88.5, 1e-8]]).astype(np.float32)
out["exp"] = {"x": bits(mx.array(xs)), "y": bits(mx.exp(mx.array(xs)))}

out["top_p"] = [{"row": r, "p": p, "out": bits(apply_top_p(rows[r], p))} for r in rows for p in [0.05, 0.5, 0.9, 0.95, 0.999]]
out["min_p"] = [{"row": r, "p": p, "keep": k, "out": bits(apply_min_p(rows[r], p, k))} for r in rows for p, k in [(0.05, 1), (0.2, 1), (0.9, 1), (0.5, 3), (1.0, 1)] if k == 1 or r == "distinct"]
out["top_k"] = [{"row": "distinct", "k": k, "out": bits(apply_top_k(rows["distinct"], k))} for k in [1, 5, 20, 63]]

cat = []
for r in rows:
    for seed in [0, 3, 99]:
        key = mx.random.key(seed)
        for temp in [0.7, 1.0, 1.5]:
            x = rows[r] * (1.0 / temp)
            xf = x.astype(mx.float32)
            w = mx.exp(xf - mx.max(xf))
            cat.append({"row": r, "seed": seed, "temp": temp, "scaled": bits(x), "token": mx.random.categorical(x, key=key).item(),
                        "cdf": bits(mx.cumsum(w, axis=-1, inclusive=False)), "sum": bits(mx.sum(w))})
special = mx.array([[-math.inf, -math.inf, 0.5, -math.inf, 0.5]], dtype=mx.bfloat16)
for seed in range(8):
    cat.append({"row": "special", "seed": seed, "temp": 1.0, "scaled": bits(special), "token": mx.random.categorical(special, key=mx.random.key(seed)).item()})
allinf = mx.full((1, 5), -math.inf, dtype=mx.bfloat16)
for seed in range(8):
    cat.append({"row": "allinf", "seed": seed, "temp": 1.0, "scaled": bits(allinf), "token": mx.random.categorical(allinf, key=mx.random.key(seed)).item()})
out["categorical"] = cat

chains = []
for r in rows:
    for cfg in [dict(temp=0.0), dict(temp=0.8), dict(temp=0.7, top_p=0.9), dict(temp=1.0, min_p=0.05), dict(temp=0.6, top_k=20),
                dict(temp=0.9, top_p=0.95, min_p=0.02, top_k=40), dict(temp=1.3, top_p=0.5, min_p=0.1, min_tokens_to_keep=3, top_k=10)]:
        if r == "distinct" and cfg.get("top_k", 0) >= 64:
            continue
        mx.random.seed(1234)
        s = make_sampler(**cfg)
        toks = [s(rows[r]).item() for _ in range(25)]
        chains.append({"row": r, "cfg": cfg, "tokens": toks})
out["chains"] = chains
print(json.dumps(out))
`

type sampleRow struct {
	DType string
	Bits  []uint32
}

type sampleOracle struct {
	Rows map[string]sampleRow
	Exp  struct{ X, Y []uint32 }
	TopP []struct {
		Row string
		P   float64
		Out []uint32
	} `json:"top_p"`
	MinP []struct {
		Row  string
		P    float64
		Keep int
		Out  []uint32
	} `json:"min_p"`
	TopK []struct {
		Row string
		K   int
		Out []uint32
	} `json:"top_k"`
	Categorical []struct {
		Row    string
		Seed   uint64
		Temp   float64
		Scaled []uint32
		Token  int
		CDF    []uint32 // the inverse-CDF intermediates, built from MLX ops
		Sum    []uint32
	}
	Chains []struct {
		Row    string
		Cfg    map[string]float64
		Tokens []int32
	}
}

func decodeBits(t *testing.T, dt string, b []uint32) ([]float32, tensor.DType) {
	t.Helper()
	out := make([]float32, len(b))
	var d tensor.DType
	switch dt {
	case "bfloat16":
		d = tensor.BF16
		for i, v := range b {
			out[i] = tensor.BF16ToFloat32(uint16(v))
		}
	case "float16":
		d = tensor.F16
		for i, v := range b {
			out[i] = tensor.F16ToFloat32(uint16(v))
		}
	case "float32":
		d = tensor.F32
		for i, v := range b {
			out[i] = math.Float32frombits(v)
		}
	default:
		t.Fatalf("unknown dtype %q", dt)
	}
	return out, d
}

// sameBits compares two rows exactly (NaN never expected; -0 and 0 differ).
func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", name, len(got), len(want))
	}
	bad := 0
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 5 {
				t.Errorf("%s: got %v, want %v (index %d)", name, got[i], want[i], i)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ", name, bad, len(got))
	}
}

func loadSampleOracle(t *testing.T) (*sampleOracle, map[string][]float32, map[string]tensor.DType) {
	var o sampleOracle
	oracle(t, sampleScript, &o)
	rows := map[string][]float32{}
	dts := map[string]tensor.DType{}
	for name, r := range o.Rows {
		rows[name], dts[name] = decodeBits(t, r.DType, r.Bits)
	}
	return &o, rows, dts
}

func TestSamplingMatchesMLX(t *testing.T) {
	o, rows, dts := loadSampleOracle(t)

	t.Run("exp", func(t *testing.T) {
		x, _ := decodeBits(t, "float32", o.Exp.X)
		want, _ := decodeBits(t, "float32", o.Exp.Y)
		got := make([]float32, len(x))
		for i, v := range x {
			got[i] = expF32(v)
		}
		sameBits(t, "exp", got, want)
	})
	for _, c := range o.TopP {
		t.Run(fmt.Sprintf("top_p/%s/p=%v", c.Row, c.P), func(t *testing.T) {
			x := append([]float32(nil), rows[c.Row]...)
			ApplyTopP(x, c.P)
			want, _ := decodeBits(t, o.Rows[c.Row].DType, c.Out)
			sameBits(t, "top_p", x, want)
		})
	}
	for _, c := range o.MinP {
		t.Run(fmt.Sprintf("min_p/%s/p=%v/keep=%d", c.Row, c.P, c.Keep), func(t *testing.T) {
			x := append([]float32(nil), rows[c.Row]...)
			ApplyMinP(x, c.P, c.Keep, dts[c.Row])
			want, _ := decodeBits(t, o.Rows[c.Row].DType, c.Out)
			sameBits(t, "min_p", x, want)
		})
	}
	for _, c := range o.TopK {
		t.Run(fmt.Sprintf("top_k/%s/k=%d", c.Row, c.K), func(t *testing.T) {
			x := append([]float32(nil), rows[c.Row]...)
			ApplyTopK(x, c.K)
			want, _ := decodeBits(t, o.Rows[c.Row].DType, c.Out)
			sameBits(t, "top_k", x, want)
		})
	}
	for _, c := range o.Categorical {
		t.Run(fmt.Sprintf("categorical/%s/seed=%d/temp=%v", c.Row, c.Seed, c.Temp), func(t *testing.T) {
			dt := "bfloat16"
			if r, ok := o.Rows[c.Row]; ok {
				dt = r.DType
			}
			want, d := decodeBits(t, dt, c.Scaled)
			if x, ok := rows[c.Row]; ok {
				x = append([]float32(nil), x...)
				ScaleTemp(x, c.Temp, d)
				sameBits(t, "scaled", x, want)
			}
			if c.CDF != nil {
				cdf := make([]float32, len(want))
				sum := categoricalCDF(cdf, want)
				wantCDF, _ := decodeBits(t, "float32", c.CDF)
				wantSum, _ := decodeBits(t, "float32", c.Sum)
				sameBits(t, "cdf", cdf, wantCDF)
				sameBits(t, "sum", []float32{sum}, wantSum)
			}
			if got := Categorical(want, Key(c.Seed)); got != c.Token {
				t.Errorf("got token %d, want %d", got, c.Token)
			}
			// In place (the draw of a row it owns): the same token.
			if got := categoricalIn(slices.Clone(want), slices.Clone(want), Key(c.Seed)); got != c.Token {
				t.Errorf("separate buffers: got token %d, want %d", got, c.Token)
			}
			own := slices.Clone(want)
			if got := categoricalIn(own, own, Key(c.Seed)); got != c.Token {
				t.Errorf("in place: got token %d, want %d", got, c.Token)
			}
		})
	}
	for _, c := range o.Chains {
		t.Run(fmt.Sprintf("chain/%s/%v", c.Row, c.Cfg), func(t *testing.T) {
			s, err := NewSampler(SamplerOptions{
				Temp: c.Cfg["temp"], TopP: c.Cfg["top_p"], MinP: c.Cfg["min_p"],
				MinTokensToKeep: int(c.Cfg["min_tokens_to_keep"]), TopK: int(c.Cfg["top_k"]), Seed: 1234,
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range c.Tokens {
				got, err := s.Sample(rows[c.Row], dts[c.Row])
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("got token %d, want %d (draw %d)", got, want, i)
				}
			}
		})
	}
}

// TestTopP16MatchesApplyTopP holds the counting form of top-p (bfloat16
// and float16 rows) to ApplyTopP's sort, bit for bit, over random rows with
// ties, −Inf entries, signed zeros and a range of top_p values.
func TestTopP16MatchesApplyTopP(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		round := rounder(dt)
		for trial := range 300 {
			n := 1 + r.IntN(3000)
			x := make([]float32, n)
			spread := []float64{0.01, 1, 4, 12}[trial%4]
			for i := range x {
				switch r.IntN(40) {
				case 0:
					x[i] = float32(math.Inf(-1))
				case 1:
					x[i] = float32(math.Copysign(0, -1))
				case 2:
					x[i] = 0
				default:
					x[i] = round(float32(r.NormFloat64()*spread - 3))
				}
			}
			for _, p := range []float64{0.05, 0.5, 0.9, 0.95, 0.999} {
				want := slices.Clone(x)
				ApplyTopP(want, p)
				got := slices.Clone(x)
				if !topP16(got, p, dt) {
					t.Fatalf("%v: topP16 declined", dt)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v trial %d n %d top_p %v: value %d is %v, ApplyTopP gives %v", dt, trial, n, p, i, got[i], want[i])
					}
				}
			}
		}
	}
	if topP16(make([]float32, 4), 0.9, tensor.F32) {
		t.Fatal("topP16 took a float32 row")
	}
}

// plainArgmax is Argmax's definition as a plain loop: the first index whose
// value beats every value before it (a NaN never does, so a NaN first value
// stays).
func plainArgmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// TestArgmax holds Argmax to the plain loop (the first index whose value
// beats every value before it, NaNs never winning): ties, NaNs first, in
// the middle and last, infinities, and lengths around its unrolling of 4.
func TestArgmax(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := [][]float32{
		{},
		{3},
		{nan, 1, 2},
		{1, nan, 2},
		{1, 2, nan},
		{2, 5, 5, 1, 5},
		{-inf, -inf, -inf},
		{nan, nan},
		{-inf, nan, -inf, -inf, -inf},
		{1, inf, 2, inf, 3, 4, 5, 6, 7},
		{0, float32(math.Copysign(0, -1)), 0, 0, 0},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= 13; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.IntN(4)) // many ties
		}
		cases = append(cases, x)
	}
	for i, x := range cases {
		if len(x) == 0 {
			if got := Argmax(x); got != 0 {
				t.Errorf("case %d: Argmax of nothing = %d, want 0", i, got)
			}
			continue
		}
		if got, want := Argmax(x), plainArgmax(x); got != want {
			t.Errorf("case %d %v: Argmax = %d, want %d", i, x, got, want)
		}
	}
}

// TestRowScansVector holds Argmax and the weights of Categorical, vector
// code where the build and CPU have it (vecMax, vecIndex, vecSub), to plain
// scalar loops on rows long and short (the vector part and the tail),
// with NaNs, infinities, both zeros and ties placed in either part: the
// index must match, the cumulative weights bit for bit.
func TestRowScansVector(t *testing.T) {
	if vecMax == nil || vecIndex == nil || vecSub == nil {
		t.Logf("no vector row scans in this build or on this CPU: only the scalar loops are tested")
	}
	plainCDF := func(x []float32) ([]float32, float32) {
		m := x[plainArgmax(x)]
		cdf := make([]float32, len(x))
		var sum float32
		if math.IsInf(float64(m), 0) {
			for i, v := range x {
				cdf[i] = sum
				if v == m {
					sum++
				}
			}
			return cdf, sum
		}
		for i, v := range x {
			cdf[i] = v - m
		}
		mlxmath.ExpSlice(cdf, cdf)
		for i, w := range cdf {
			cdf[i] = sum
			sum += w
		}
		return cdf, sum
	}
	inf, nan, negZero := float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	specials := []float32{nan, inf, -inf, 0, negZero, 7.5}
	r := rand.New(rand.NewPCG(9, 10))
	var rows [][]float32
	for _, n := range []int{1, 15, 16, 17, 31, 32, 33, 47, 64, 70, 1000, 49155} {
		for variant := range 7 {
			x := make([]float32, n)
			for i := range x {
				x[i] = tensor.RoundBF16(float32(r.NormFloat64() * 4))
			}
			switch variant {
			case 1: // ties of the maximum, one in the tail
				x[r.IntN(n)], x[n-1] = 20, 20
			case 2: // specials anywhere, a NaN first half the time
				for range 1 + n/50 {
					x[r.IntN(n)] = specials[r.IntN(len(specials))]
				}
				if r.IntN(2) == 0 {
					x[0] = nan
				}
			case 3: // the maximum in the first lane block only
				x[min(3, n-1)] = 30
			case 4: // all zeros of both signs
				for i := range x {
					x[i] = []float32{0, negZero}[r.IntN(2)]
				}
			case 5: // +Inf present: the weights count the infinities
				x[r.IntN(n)], x[n-1] = inf, inf
			case 6: // NaNs after the maximum in its vector lane
				x[min(5, n-1)] = 40
				for i := 5 + 16; i < n; i += 16 {
					x[i] = nan
				}
			}
			rows = append(rows, x)
		}
	}
	for k, x := range rows {
		if got, want := Argmax(x), plainArgmax(x); got != want {
			t.Fatalf("row %d (length %d): Argmax = %d, want %d", k, len(x), got, want)
		}
		if x[0] != x[0] {
			continue // NaN weights everywhere: nothing to compare bit for bit
		}
		cdf := make([]float32, len(x))
		sum := categoricalCDF(cdf, x)
		wantCDF, wantSum := plainCDF(x)
		if math.Float32bits(sum) != math.Float32bits(wantSum) && !(sum != sum && wantSum != wantSum) {
			t.Fatalf("row %d (length %d): total weight %v, want %v", k, len(x), sum, wantSum)
		}
		for i := range cdf {
			if math.Float32bits(cdf[i]) != math.Float32bits(wantCDF[i]) && !(cdf[i] != cdf[i] && wantCDF[i] != wantCDF[i]) {
				t.Fatalf("row %d (length %d): cumulative weight %d is %v, want %v", k, len(x), i, cdf[i], wantCDF[i])
			}
		}
	}
}

// TestMaskBelow holds maskBelow (vector code where the build and CPU have
// it: vecMaskBelow) to the plain loop, bit for bit: values of every kind
// (NaNs stay, ties with the threshold stay) on lengths around the vector
// width, thresholds finite, infinite and NaN.
func TestMaskBelow(t *testing.T) {
	if vecMaskBelow == nil {
		t.Logf("no vector maskBelow in this build or on this CPU: only the scalar loop is tested")
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	specials := []float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1)), 1.5}
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{0, 1, 15, 16, 17, 48, 100, 1000} {
		for _, th := range []float32{1.5, 0, -inf, inf, nan, -2.25} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * 3)
				if r.IntN(4) == 0 {
					x[i] = specials[r.IntN(len(specials))]
				}
			}
			want := append([]float32(nil), x...)
			for i, v := range want {
				if v < th {
					want[i] = -inf
				}
			}
			maskBelow(x, th)
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
					t.Fatalf("length %d, threshold %v, index %d: %v, want %v", n, th, i, x[i], want[i])
				}
			}
		}
	}
}

// TestScaleTempBF16Vector holds ScaleTemp's bfloat16 loop, vector code where
// the build and CPU have it (scaleBF16), to the scalar rounding of each
// product, bit for bit: every bfloat16 pattern (NaNs, infinities,
// subnormals, overflow past the largest finite value) and values between
// them, at three temperatures, for lengths 0 to 40 at three starts and the
// whole row.
func TestScaleTempBF16Vector(t *testing.T) {
	if scaleBF16 == nil {
		t.Logf("no vector ScaleTemp in this build or on this CPU: only the scalar loop is tested")
	}
	in := make([]float32, 0, 2*65536)
	for b := range uint32(65536) {
		in = append(in, math.Float32frombits(b<<16), math.Float32frombits(b<<16|0x8001))
	}
	checkScaleTemp(t, in, []float64{0.7, 0.8, 1.3}, tensor.BF16, tensor.RoundBF16, [2]int{0, len(in)})
}

// checkScaleTemp holds ScaleTemp(x, temp, dt) on spans of in to round(v ·
// round(1/temp)) of each value, bit for bit, at each temperature: on the
// whole spans given and on lengths 0 to 40 at three starts.
func checkScaleTemp(t *testing.T, in []float32, temps []float64, dt tensor.DType, round func(float32) float32, whole ...[2]int) {
	t.Helper()
	spans := whole
	for n := range 41 {
		for at := range 3 {
			spans = append(spans, [2]int{1000*n + at, 1000*n + at + n})
		}
	}
	for _, temp := range temps {
		inv := round(float32(1 / temp))
		for _, sp := range spans {
			x := append([]float32(nil), in[sp[0]:sp[1]]...)
			ScaleTemp(x, temp, dt)
			for i, v := range in[sp[0]:sp[1]] {
				want := round(v * inv)
				if math.Float32bits(x[i]) != math.Float32bits(want) {
					t.Fatalf("temp %v, span %v, index %d: %#08x scaled to %#08x, want %#08x", temp, sp, i, math.Float32bits(v), math.Float32bits(x[i]), math.Float32bits(want))
				}
			}
		}
	}
}

// TestScaleTempF16Vector holds ScaleTemp's float16 loop, vector code where
// the build and CPU have it (scaleF16), to tensor.RoundF16 of each product,
// bit for bit: every float16 pattern and every bfloat16 one (all exponents:
// products that are float16 subnormals, zeros, overflows, NaNs, and those
// that round up past a binade or past the largest float16), at four
// temperatures, for lengths 0 to 40 at three starts and the whole row.
func TestScaleTempF16Vector(t *testing.T) {
	if scaleF16 == nil {
		t.Logf("no vector ScaleTemp for float16 in this build or on this CPU: only the scalar loop is tested")
	}
	in := make([]float32, 0, 3*65536+16<<12)
	for b := range uint32(65536) {
		in = append(in, tensor.F16ToFloat32(uint16(b)), math.Float32frombits(b<<16), math.Float32frombits(b<<16|0x0fff))
	}
	// Whole blocks of float16's normal range (the vector path's), float32
	// mantissas of every low pattern, ties to even among them, and the
	// edges: just under 2^-14 (rounding up to it or not) and under 2^16
	// (rounding past the largest float16).
	r := rand.New(rand.NewPCG(11, 12))
	for block := range 1 << 12 {
		for range 16 {
			e := 114 + r.Uint32N(26) // well inside: every product of the block stays normal
			m := r.Uint32N(1 << 23)
			if r.IntN(3) == 0 {
				m = m&^0x1fff | 0x1000 // a tie
			}
			if block%4 == 1 && r.IntN(4) == 0 { // infinities and zeros among normal values (a row after top-p)
				in = append(in, []float32{float32(math.Inf(-1)), float32(math.Inf(1)), 0, float32(math.Copysign(0, -1))}[r.IntN(4)])
				continue
			}
			if block%4 == 3 { // one block in four reaches the edges
				switch r.IntN(4) {
				case 0:
					e, m = 112, 0x7fe000|r.Uint32N(0x2000) // just under 2^-14
				case 1:
					e, m = 142, 0x7fe000|r.Uint32N(0x2000) // just under 2^16
				case 2:
					e = 112 + r.Uint32N(32) // a binade each side too
				}
			}
			in = append(in, math.Float32frombits(r.Uint32N(2)<<31|e<<23|m))
		}
	}
	// Temperature 1: the products are the edge values themselves.
	checkScaleTemp(t, in, []float64{0.7, 0.8, 1, 1.3}, tensor.F16, tensor.RoundF16, [2]int{0, len(in)}, [2]int{3 * 65536, len(in)})
}
