package kernel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tensor"
)

// These tests run MLX itself (testdata/mlx_oracle.py in the project's
// .venv, on MLX's CPU device) on inputs made here, and compare our kernels
// with its outputs: Quantize, Dequantize and SwiGLU bit for bit; RMSNorm,
// RoPE, SDPA and QuantizedMatmul are measured and bounded (their documented
// semantics differ from MLX's CPU graph in where they round).

type oracleCase struct {
	Name        string  `json:"name"`
	Op          string  `json:"op"`
	DType       string  `json:"dtype"`
	Rows        int     `json:"rows,omitempty"`
	Cols        int     `json:"cols,omitempty"`
	Group       int     `json:"group,omitempty"`
	Bits        int     `json:"bits,omitempty"`
	N           int     `json:"n,omitempty"`
	Eps         float32 `json:"eps,omitempty"`
	B           int     `json:"b,omitempty"`
	H           int     `json:"h,omitempty"`
	HK          int     `json:"hk,omitempty"`
	L           int     `json:"l,omitempty"`
	S           int     `json:"s,omitempty"`
	D           int     `json:"d,omitempty"`
	M           int     `json:"m,omitempty"`
	K           int     `json:"k,omitempty"`
	Dims        int     `json:"dims,omitempty"`
	Traditional bool    `json:"traditional"`
	Base        float32 `json:"base,omitempty"`
	Scale       float32 `json:"scale,omitempty"`
	Offsets     []int   `json:"offsets,omitempty"`
	Causal      bool    `json:"causal"`

	inputs map[string][]float32
}

var oracleRound = map[string]Rounder{"float32": Identity, "bfloat16": tensor.RoundBF16, "float16": tensor.RoundF16}

// runOracle writes the cases, runs MLX on them and returns a reader of outputs.
func runOracle(t *testing.T, cases []*oracleCase) func(c *oracleCase, name string) []byte {
	t.Helper()
	py := testenv.Python(t)
	dir := t.TempDir()
	for _, c := range cases {
		for name, v := range c.inputs {
			buf := make([]byte, 4*len(v))
			for i, f := range v {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
			}
			if err := os.WriteFile(filepath.Join(dir, c.Name+"."+name+".bin"), buf, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	js, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cases.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "mlx_oracle.py"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mlx_oracle.py failed: %v\n%s", err, out)
	}
	return func(c *oracleCase, name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, c.Name+"."+name+".bin"))
		if err != nil {
			t.Fatalf("oracle output %s of %s: %v", name, c.Name, err)
		}
		return b
	}
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func u32s(b []byte) []uint32 {
	v := make([]uint32, len(b)/4)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return v
}

// countDiff returns how many elements differ in bits (NaNs match NaNs) and
// the largest difference in units of the dtype's ulp at the wanted value.
func countDiff(got, want []float32, round Rounder) (n int, maxULP float64) {
	for i := range want {
		g, w := got[i], want[i]
		if (g != g) && (w != w) || math.Float32bits(g) == math.Float32bits(w) {
			continue
		}
		n++
		if g != g || w != w || math.IsInf(float64(g), 0) || math.IsInf(float64(w), 0) {
			maxULP = math.Inf(1)
			continue
		}
		maxULP = max(maxULP, math.Abs(float64(g)-float64(w))/ulpOf(w, round))
	}
	return n, maxULP
}

// scaledDiff returns max |got − want| in ulps of the dtype at max |want|:
// an absolute measure that near-zero outputs (cancellation in RoPE and
// attention) cannot inflate. Any NaN/Inf mismatch gives +Inf.
func scaledDiff(got, want []float32, round Rounder) float64 {
	var big float64
	for _, w := range want {
		big = max(big, math.Abs(float64(w)))
	}
	u := ulpOf(float32(big), round)
	var m float64
	for i, w := range want {
		g := got[i]
		if (g != g) != (w != w) {
			return math.Inf(1)
		}
		if g == g {
			m = max(m, math.Abs(float64(g)-float64(w))/u)
		}
	}
	return m
}

// ulpOf is the spacing of the dtype's values at |w|.
func ulpOf(w float32, round Rounder) float64 {
	mant := 24
	switch {
	case round(1+1.0/256) == 1: // bf16 (8 significant bits)
		mant = 8
	case round(1+1.0/2048) == 1: // f16 (11 significant bits)
		mant = 11
	}
	a := math.Abs(float64(w))
	if a == 0 {
		a = math.SmallestNonzeroFloat32
	}
	_, e := math.Frexp(a)
	return math.Ldexp(1, e-mant)
}

func TestMLXQuantizeDequantize(t *testing.T) {
	var cases []*oracleCase
	for _, dt := range []string{"float32", "bfloat16", "float16"} {
		for _, bits := range allBits {
			for _, gs := range allGroups {
				rows, cols := 6, 7*gs
				c := &oracleCase{Name: fmt.Sprintf("quantize_%s_b%d_g%d", dt, bits, gs), Op: "quantize", DType: dt, Rows: rows, Cols: cols, Group: gs, Bits: bits}
				r := newRand(uint64(len(cases) + 1))
				w := quantInput(r, rows, cols, gs, oracleRound[dt])
				// Row 5: wider dynamic range, and exact .5 ties of (w−b)/s
				// are likely with small integers.
				for i := range cols {
					w[5*cols+i] = oracleRound[dt](float32(r.IntN(33) - 16))
				}
				c.inputs = map[string][]float32{"w": w}
				cases = append(cases, c)
			}
		}
	}
	// NaN inside a group, and ±Inf: MLX's CPU behaviour on them.
	special := &oracleCase{Name: "quantize_special", Op: "quantize", DType: "float32", Rows: 3, Cols: 64, Group: 32, Bits: 4}
	w := randVec(newRand(99), 3*64, 1, Identity)
	w[5] = float32(math.NaN())
	w[64+3] = float32(math.Inf(1))
	w[128+40] = float32(math.Inf(-1))
	special.inputs = map[string][]float32{"w": w}
	cases = append(cases, special)

	out := runOracle(t, cases)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			round := oracleRound[c.DType]
			rows, cols, gs, bits := c.Rows, c.Cols, c.Group, c.Bits
			wantWQ, wantS, wantB, wantDeq := u32s(out(c, "wq")), f32s(out(c, "scales")), f32s(out(c, "biases")), f32s(out(c, "deq"))
			nw, ng := rows*WordsPerRow(cols, bits), rows*cols/gs
			wq, sc, bi := make([]uint32, nw), make([]float32, ng), make([]float32, ng)
			Quantize(wq, sc, bi, c.inputs["w"], rows, cols, gs, bits, round)
			for i := range wantWQ {
				if wq[i] != wantWQ[i] {
					t.Errorf("wq: got 0x%08x, want 0x%08x (word %d)", wq[i], wantWQ[i], i)
					break
				}
			}
			expectSame(t, sc, wantS, "scales")
			expectSame(t, bi, wantB, "biases")
			// Dequantize MLX's own quantization.
			deq := make([]float32, rows*cols)
			Dequantize(deq, wantWQ, wantS, wantB, rows, cols, gs, bits, round)
			expectSame(t, deq, wantDeq, "dequantized")
		})
	}
}

func TestMLXSwiGLU(t *testing.T) {
	var cases []*oracleCase
	r := newRand(7)
	for _, dt := range []string{"bfloat16", "float16", "float32"} {
		round := oracleRound[dt]
		var gate []float32
		switch dt {
		case "bfloat16": // every bf16 value
			for b := range 1 << 16 {
				gate = append(gate, tensor.BF16ToFloat32(uint16(b)))
			}
		case "float16": // every f16 value
			for b := range 1 << 16 {
				gate = append(gate, tensor.F16ToFloat32(uint16(b)))
			}
		default: // f32: wide random values, plus specials
			for range 1 << 17 {
				gate = append(gate, float32(r.NormFloat64()*math.Pow(10, r.Float64()*4-2)))
			}
			gate = append(gate, 0, float32(math.Copysign(0, -1)), 88, -88, 88.5, -88.5, 87.9, -87.9, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()))
		}
		up := randVec(r, len(gate), 2, round)
		c := &oracleCase{Name: "swiglu_" + dt, Op: "swiglu", DType: dt}
		c.inputs = map[string][]float32{"gate": gate, "up": up}
		cases = append(cases, c)
	}
	out := runOracle(t, cases)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			round := oracleRound[c.DType]
			want := f32s(out(c, "out"))
			got := make([]float32, len(want))
			SwiGLU(got, c.inputs["gate"], c.inputs["up"], round)
			n, mu := countDiff(got, want, round)
			t.Logf("%s: %d of %d elements differ from MLX (max %.3g ulp)", c.Name, n, len(want), mu)
			expectSame(t, got, want, "swiglu vs MLX")
		})
	}
}

// TestMLXMeasured compares the kernels whose documented numerics are not
// MLX's CPU graph (RoPE and SDPA follow MLX's fused Metal kernels: float32
// inside, one rounding; QuantizedMatmul accumulates per group like Metal's
// qmv) and RMSNorm, and bounds the difference in ulps of the dtype.
func TestMLXMeasured(t *testing.T) {
	r := newRand(11)
	var cases []*oracleCase
	type bound struct {
		maxULP  float64 // largest allowed difference, in ulps of the dtype at the case's largest |output|
		maxFrac float64 // largest allowed fraction of differing elements
	}
	bounds := map[string]bound{}
	for _, dt := range []string{"float32", "bfloat16"} {
		round := oracleRound[dt]
		c := &oracleCase{Name: "rms_norm_" + dt, Op: "rms_norm", DType: dt, Rows: 9, N: 1536, Eps: 1e-5}
		c.inputs = map[string][]float32{"x": randVec(r, 9*1536, 3, round), "w": randVec(r, 1536, 1, round)}
		cases = append(cases, c)
		bounds[c.Name] = bound{0, 0}

		for _, trad := range []bool{false, true} {
			c := &oracleCase{Name: fmt.Sprintf("rope_%s_trad%v", dt, trad), Op: "rope", DType: dt, B: 2, H: 3, L: 17, D: 128, Dims: 128, Traditional: trad, Base: 10000, Scale: 1, Offsets: []int{5, 300}}
			c.inputs = map[string][]float32{"x": randVec(r, 2*3*17*128, 1, round)}
			cases = append(cases, c)
			// MLX's CPU rounds cos/sin and every op to the dtype, and its
			// float32 sin/cos (a Cephes polynomial after a float32 range
			// reduction) loses about 2^-24·θ absolute at θ ≈ 300: ~100 ulps
			// of f32 here. Ours is checked against float64 in rope_test.go.
			bounds[c.Name] = bound{map[string]float64{"float32": 160, "bfloat16": 2}[dt], 0.5}
		}
		for _, causal := range []bool{false, true} {
			c := &oracleCase{Name: fmt.Sprintf("sdpa_%s_causal%v", dt, causal), Op: "sdpa", DType: dt, B: 1, H: 8, HK: 2, L: 5, S: 23, D: 64, Scale: 0.125, Causal: causal}
			c.inputs = map[string][]float32{
				"q": randVec(r, 8*5*64, 1, round), "k": randVec(r, 2*23*64, 1, round), "v": randVec(r, 2*23*64, 1, round),
			}
			cases = append(cases, c)
			// MLX's CPU fallback rounds q·scale, the scores and the probabilities to the dtype.
			bounds[c.Name] = bound{map[string]float64{"float32": 8, "bfloat16": 2}[dt], 1}
		}
		for _, bits := range []int{4, 8} {
			c := &oracleCase{Name: fmt.Sprintf("qmm_%s_b%d", dt, bits), Op: "qmm", DType: dt, M: 3, N: 37, K: 512, Group: 64, Bits: bits}
			c.inputs = map[string][]float32{"x": randVec(r, 3*512, 1, round), "w": randVec(r, 37*512, 0.05, round)}
			cases = append(cases, c)
			// MLX's CPU accumulates Σ x·(s·q+b) in the dtype (bf16) or in
			// float32 without the per-group split.
			bounds[c.Name] = bound{16, 1}
		}
	}
	out := runOracle(t, cases)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			round := oracleRound[c.DType]
			want := f32s(out(c, "out"))
			got := make([]float32, len(want))
			switch c.Op {
			case "rms_norm":
				RMSNorm(got, c.inputs["x"], c.inputs["w"], c.Rows, c.N, c.Eps, round, AccF32)
			case "rope":
				RoPE(got, c.inputs["x"], c.B, c.H, c.L, c.D, RoPEParams{Dims: c.Dims, Traditional: c.Traditional, Base: c.Base, Scale: c.Scale}, c.Offsets, round)
			case "sdpa":
				m := Mask{}
				if c.Causal {
					m.Kind = MaskCausal
				}
				SDPA(got, c.inputs["q"], c.inputs["k"], c.inputs["v"], c.B, c.H, c.HK, c.L, c.S, c.D, c.D, c.Scale, m, round, AccF32)
			case "qmm":
				QuantizedMatmulT(got, c.inputs["x"], u32s(out(c, "wq")), f32s(out(c, "scales")), f32s(out(c, "biases")), c.M, c.N, c.K, c.Group, c.Bits, round, AccF32)
			}
			n, _ := countDiff(got, want, round)
			mu := scaledDiff(got, want, round)
			t.Logf("%s: %d of %d elements differ from MLX's CPU (max %.3g ulp of the largest |output|)", c.Name, n, len(want), mu)
			b := bounds[c.Name]
			if mu > b.maxULP || float64(n) > b.maxFrac*float64(len(want)) {
				t.Errorf("%s: %d of %d differ, max %.3g ulp; want at most %.0f%% and %.3g ulp", c.Name, n, len(want), mu, 100*b.maxFrac, b.maxULP)
			}
		})
	}
}
