package nn

import (
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/internal/testenv"
)

// ropeCase is one initialize_rope call and the (L, offset) pairs it is
// applied at.
type ropeCase struct {
	Name        string         `json:"name"`
	Dims        int            `json:"dims"`
	Base        float64        `json:"base"`
	Traditional bool           `json:"traditional"`
	Scaling     map[string]any `json:"scaling"`
	MaxPos      int            `json:"max_pos"`
	Calls       [][2]int       `json:"calls"`
}

// ropeOracle runs mlx_lm's initialize_rope for each case, applies the layer
// to ones [1, 1, L, dims] at each call's offset with mx.fast.rope replaced by
// a recorder, and prints what mlx_lm passed to mx.fast.rope.
const ropeOracle = `
import json, sys
import numpy as np
import mlx.core as mx
real = mx.fast.rope
calls = []
def record(x, dims, **kw):
    f = kw.get("freqs")
    calls.append({
        "dims": dims, "traditional": kw["traditional"],
        "base": None if kw["base"] is None else float(kw["base"]),
        "scale": float(kw["scale"]), "offset": kw["offset"],
        "freqs": None if f is None else np.array(f.astype(mx.float32)).view(np.uint32).tolist(),
        "x0": np.array(x.astype(mx.float32)).reshape(-1)[:1].view(np.uint32).tolist()[0],
    })
    return real(x, dims, **kw)
mx.fast.rope = record
from mlx_lm.models.rope_utils import initialize_rope
out = []
for c in json.load(sys.stdin):
    r = initialize_rope(c["dims"], c["base"], c["traditional"], c["scaling"], c["max_pos"])
    calls.clear()
    for L, off in c["calls"]:
        mx.eval(r(mx.ones((1, 1, L, c["dims"]), dtype=mx.float32), offset=off))
    out.append(list(calls))
print(json.dumps(out))
`

type ropeCall struct {
	Dims        int      `json:"dims"`
	Traditional bool     `json:"traditional"`
	Base        *float64 `json:"base"`
	Scale       float64  `json:"scale"`
	Offset      int      `json:"offset"`
	Freqs       []uint32 `json:"freqs"`
	X0          uint32   `json:"x0"`
}

// scalingFromJSON parses a rope_scaling block through the checkpoint
// package, so the defaults are the config parser's.
func scalingFromJSON(t *testing.T, c ropeCase) *checkpoint.RopeScaling {
	t.Helper()
	cfg := map[string]any{
		"model_type": "llama", "hidden_size": c.Dims * 4, "num_hidden_layers": 1, "intermediate_size": 8,
		"num_attention_heads": 4, "head_dim": c.Dims, "vocab_size": 8, "rms_norm_eps": 1e-5,
		"rope_theta": c.Base, "rope_traditional": c.Traditional, "rope_scaling": c.Scaling,
	}
	if c.MaxPos > 0 {
		cfg["max_position_embeddings"] = c.MaxPos
	}
	data, _ := json.Marshal(cfg)
	parsed, err := checkpoint.ParseConfig(data, c.Name)
	if err != nil {
		t.Fatalf("%s: config: %v", c.Name, err)
	}
	return parsed.RopeScaling
}

func TestRoPEAgainstMLXLM(t *testing.T) {
	py := testenv.Python(t)
	longFactor := make([]float64, 16)
	for i := range longFactor {
		longFactor[i] = 1 + 0.37*float64(i)
	}
	cases := []ropeCase{
		{Name: "default", Dims: 32, Base: 10000, MaxPos: 256, Calls: [][2]int{{3, 0}}},
		{Name: "default/traditional", Dims: 64, Base: 1e6, Traditional: true, Calls: [][2]int{{1, 7}}},
		{Name: "linear", Dims: 32, Base: 10000, Scaling: map[string]any{"type": "linear", "factor": 3.0}, Calls: [][2]int{{2, 5}}},
		{Name: "dynamic", Dims: 32, Base: 10000, MaxPos: 256, Scaling: map[string]any{"type": "dynamic", "factor": 2.0},
			Calls: [][2]int{{1, 0}, {10, 250}, {1, 300}, {100, 1000}}},
		{Name: "llama3/fixture", Dims: 32, Base: 10000, MaxPos: 256, Scaling: map[string]any{
			"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, Calls: [][2]int{{1, 0}}},
		{Name: "llama3/3.2", Dims: 64, Base: 500000, MaxPos: 131072, Scaling: map[string]any{
			"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, Calls: [][2]int{{1, 0}}},
		{Name: "llama3/defaults", Dims: 128, Base: 500000, MaxPos: 131072, Scaling: map[string]any{"rope_type": "llama3", "factor": 8.0}, Calls: [][2]int{{1, 0}}},
		{Name: "yarn", Dims: 64, Base: 10000, MaxPos: 16384, Scaling: map[string]any{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, Calls: [][2]int{{1, 2}}},
		{Name: "yarn/mscale", Dims: 64, Base: 10000, MaxPos: 163840, Scaling: map[string]any{"type": "deepseek_yarn", "factor": 40.0,
			"original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.5}, Calls: [][2]int{{1, 0}}},
		{Name: "yarn/traditional", Dims: 32, Base: 1e6, Traditional: true, MaxPos: 8192, Scaling: map[string]any{"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048}, Calls: [][2]int{{1, 0}}},
		{Name: "longrope", Dims: 32, Base: 10000, MaxPos: 131072, Traditional: true, Scaling: map[string]any{"type": "longrope",
			"original_max_position_embeddings": 4096, "long_factor": longFactor, "short_factor": 1.0}, Calls: [][2]int{{1, 0}}},
		{Name: "proportional", Dims: 32, Base: 10000, Scaling: map[string]any{"rope_type": "proportional", "factor": 2.0, "partial_rotary_factor": 0.5}, Calls: [][2]int{{1, 0}}},
		{Name: "mrope", Dims: 32, Base: 10000, Scaling: map[string]any{"type": "mrope", "mrope_section": []int{4, 6, 6}}, Calls: [][2]int{{1, 0}}},
	}
	in, _ := json.Marshal(cases)
	cmd := exec.Command(py, "-c", ropeOracle)
	cmd.Stdin = strings.NewReader(string(in))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var want [][]ropeCall
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("oracle output: %v", err)
	}
	for i, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r, err := buildRoPE(c.Dims, c.Base, c.Traditional, scalingFromJSON(t, c), c.MaxPos)
			if err != nil {
				t.Fatal(err)
			}
			for j, call := range c.Calls {
				w := want[i][j]
				L, off := call[0], call[1]
				where := fmt.Sprintf("%s, L=%d offset=%d", c.Name, L, off)
				if r.Params.Dims != w.Dims || r.Params.Traditional != w.Traditional {
					t.Errorf("dims, traditional: got %d, %v, want %d, %v (%s)", r.Params.Dims, r.Params.Traditional, w.Dims, w.Traditional, where)
				}
				if got := r.Params.Scale; got != float32(w.Scale) {
					t.Errorf("scale: got %v, want %v (%s)", got, float32(w.Scale), where)
				}
				base := float64(r.Params.Base)
				if r.dynamic {
					base = r.DynamicBase(L, off)
				}
				switch {
				case w.Base == nil && r.Freqs == nil:
					t.Errorf("freqs: got none, mlx_lm passes freqs (%s)", where)
				case w.Base != nil && r.Freqs != nil:
					t.Errorf("freqs: got %d, mlx_lm passes base %v (%s)", len(r.Freqs), *w.Base, where)
				case w.Base != nil && float32(base) != float32(*w.Base):
					t.Errorf("base: got %v (float32 %v), want %v (float32 %v) (%s)", base, float32(base), *w.Base, float32(*w.Base), where)
				}
				if len(w.Freqs) != len(r.Freqs) {
					t.Fatalf("freqs: got %d values, want %d (%s)", len(r.Freqs), len(w.Freqs), where)
				}
				for k, bits := range w.Freqs {
					if got := math.Float32bits(r.Freqs[k]); got != bits {
						t.Errorf("freqs[%d]: got %v (%#08x), want %v (%#08x) (%s)", k, r.Freqs[k], got, math.Float32frombits(bits), bits, where)
					}
				}
				// The oracle fed ones; what reached mx.fast.rope is the input scale.
				if got, want := float32(r.InputScale), math.Float32frombits(w.X0); got != want {
					t.Errorf("input scale: got %v, want %v (%s)", got, want, where)
				}
			}
		})
	}
}

func TestRoPEUnsupportedType(t *testing.T) {
	for _, typ := range []string{"su", "ntk", ""} {
		t.Run(typ, func(t *testing.T) {
			_, err := buildRoPE(32, 10000, false, &checkpoint.RopeScaling{Type: typ, Factor: 2}, 256)
			if err == nil || !strings.Contains(err.Error(), "rope_scaling.type") || !strings.Contains(err.Error(), fmt.Sprintf("%q", typ)) {
				t.Fatalf("got error %v, want one naming rope_scaling.type and %q", err, typ)
			}
		})
	}
}
