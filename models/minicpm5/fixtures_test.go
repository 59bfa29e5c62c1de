package minicpm5

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tensor"
)

// fixtureRoot holds the oracle's tiny checkpoints (conformance/README.md).
// MLXGO_MODEL_FIXTURES points elsewhere (the models/ directory of fixtures
// generated with conformance/oracle/generate.py --only models --out DIR).
var fixtureRoot = func() string {
	if d := os.Getenv("MLXGO_MODEL_FIXTURES"); d != "" {
		return d
	}
	return "../../conformance/testdata/models"
}()

// checkpoints lists the fixture checkpoint directories, or skips (fails with
// MLXGO_REQUIRE_VENV=1, as under `make test`) when there are none.
func checkpoints(t *testing.T) []string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(fixtureRoot, "*", "config.json"))
	if len(dirs) == 0 {
		testenv.Missing(t, "no fixture checkpoints under "+fixtureRoot+" (run `make oracle`); the model is not checked against mlx_lm")
	}
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	sort.Strings(dirs)
	return dirs
}

// fixtureCase is a case manifest (conformance/README.md) with its arrays.
type fixtureCase struct {
	Name    string         `json:"name"`
	Op      string         `json:"op"`
	DType   string         `json:"dtype"`
	Params  map[string]any `json:"params"`
	Outputs []string       `json:"outputs"`
	Arrays  string         `json:"arrays"`
	file    *tensor.SafetensorsFile
}

func (c *fixtureCase) array(t *testing.T, name string) *tensor.Dense {
	t.Helper()
	d, err := c.file.TensorCopy(name)
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return d
}

func (c *fixtureCase) ids(t *testing.T) []int32 {
	return c.array(t, "in.ids").Int32s()
}

func (c *fixtureCase) param(t *testing.T, key string) int {
	t.Helper()
	v, ok := c.Params[key].(float64)
	if !ok {
		t.Fatalf("%s: params.%s missing or not a number", c.Name, key)
	}
	return int(v)
}

// cases loads the case manifests of one checkpoint.
func cases(t *testing.T, dir string) []*fixtureCase {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "cases", "*.json"))
	if len(paths) == 0 {
		t.Fatalf("%s: no cases", dir)
	}
	var out []*fixtureCase
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c := &fixtureCase{}
		if err := json.Unmarshal(data, c); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if c.file, err = tensor.OpenSafetensors(filepath.Join(filepath.Dir(p), c.Arrays)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.file.Close() })
		out = append(out, c)
	}
	return out
}

func newCPU(t *testing.T) backend.Backend {
	t.Helper()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func load(t *testing.T, b backend.Backend, dir string) *Model {
	t.Helper()
	m, err := Load(b, dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func host(t *testing.T, b backend.Backend, x backend.Array) []float32 {
	t.Helper()
	d, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToFloat32()
}

// Tolerances for our CPU backend against the oracle (MLX's CPU device).
//
// float32: the two compute the same ops in the same dtype and differ only in
// summation order inside the reductions (dot products of up to 384 terms,
// RMSNorm and softmax sums). Each reordering moves a result by about
// sqrt(K)·u relative to its terms' magnitude (u = 2^-24 ≈ 6e-8, K ≤ 384:
// ≈ 1.2e-6); a logit passes through about 10 such ops per layer, 3 layers
// and the head, so a pessimistic sum is ≈ 30·1.2e-6 ≈ 4e-5 of the logit
// scale. The bound is 1e-4·max(1, max|oracle|) (the conformance oracle
// states the same 1e-4 for these logits).
//
// bfloat16, unquantized: both round every op's output to bf16 (u = 2^-8) at
// the same points, but MLX's CPU device runs the unfused attention fallback
// (scores and probabilities rounded to bf16, RoPE's cos/sin rounded to bf16)
// where our backend keeps them in float32 as Metal's fused kernels do; a
// score of magnitude 8 then moves by up to 2^-5, its probability by ~3%.
// The bound is 8 bf16 ulps of the output's scale, 8·2^(floor(log2 scale)−7)
// (3–6% of the scale).
//
// bfloat16, quantized: on its CPU device MLX's bf16 quantized_matmul
// accumulates the dot product in bf16 (every partial sum rounded; measured
// with mx.quantized_matmul: 93% of the outputs differ from the float32
// accumulation that Metal and our backend use, by up to 4% of the output
// scale), so the oracle itself is off by a few percent per projection and
// that compounds over 7 projections per layer. The bound is 0.1·scale, and
// greedy tokens are not compared (near-ties decided by that noise diverge);
// the f32 and unquantized bf16 checkpoints hold the tokens.
func tolerance(dtype string, quantized bool, scale float64) float64 {
	scale = math.Max(1, scale)
	switch {
	case dtype == "float32":
		return 1e-4 * scale
	case quantized:
		return 0.1 * scale
	}
	return 8 * math.Exp2(math.Floor(math.Log2(scale))-7)
}

// exactTokens reports whether the oracle's tokens are expected of us.
func exactTokens(m *Model) bool {
	return m.DType() == tensor.F32 || m.Config().Quantization == nil
}

// diff is the largest absolute difference and where it is.
type diff struct {
	max, scale, tol float64
	at              int
	got, want       float32
}

func compare(dtype string, quantized bool, got, want []float32) diff {
	d := diff{at: -1}
	for i := range want {
		d.scale = math.Max(d.scale, math.Abs(float64(want[i])))
	}
	d.tol = tolerance(dtype, quantized, d.scale)
	for i := range want {
		e := math.Abs(float64(got[i]) - float64(want[i]))
		if e > d.max || math.IsNaN(e) {
			d.max, d.at, d.got, d.want = e, i, got[i], want[i]
			if math.IsNaN(e) {
				d.max = math.Inf(1)
			}
		}
	}
	return d
}

func (d diff) String() string {
	return fmt.Sprintf("max |Δ| %.3g (%.3g of scale %.3g, bound %.3g) at %d: got %v, want %v", d.max, d.max/math.Max(1, d.scale), d.scale, d.tol, d.at, d.got, d.want)
}

// argmax returns the index of the largest value (ties to the smaller) and
// the gap to the second largest.
func argmax(row []float32) (int, float64) {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	second := math.Inf(-1)
	for i, v := range row {
		if i != best {
			second = math.Max(second, float64(v))
		}
	}
	return best, float64(row[best]) - second
}

// checkRows compares [rows, V] logits and the argmax of each row where the
// oracle's margin is clear.
func checkRows(t *testing.T, m *Model, name string, got, want []float32) diff {
	t.Helper()
	V := m.Config().VocabSize
	if len(got) != len(want) {
		t.Fatalf("%s: got %d logits, want %d", name, len(got), len(want))
	}
	d := compare(m.DType().MLXName(), m.Config().Quantization != nil, got, want)
	if !(d.max <= d.tol) {
		t.Errorf("%s: %v", name, d)
	}
	for r := 0; r < len(want)/V; r++ {
		wi, margin := argmax(want[r*V : (r+1)*V])
		gi, _ := argmax(got[r*V : (r+1)*V])
		if margin > 2*d.tol && gi != wi {
			t.Errorf("%s: argmax of row %d: got %d, want %d (oracle margin %.3g)", name, r, gi, wi, margin)
		}
	}
	return d
}
