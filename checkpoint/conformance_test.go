package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestOpenOracleCheckpoints opens every tiny checkpoint mlx_lm saved under
// conformance/testdata/models and checks, for a few layers, that the
// quantization Open resolved agrees with config.json read independently here.
func TestOpenOracleCheckpoints(t *testing.T) {
	checkOracleCheckpoints(t, "../conformance/testdata/models/*/config.json")
}

// checkOracleCheckpoints runs the checks on every directory whose config.json
// matches pattern, failing when there is none.
func checkOracleCheckpoints(t *testing.T, pattern string) {
	dirs, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatalf("no checkpoints match %s (run `make oracle`); this test must not pass without them", pattern)
	}
	for _, cfgPath := range dirs {
		dir := filepath.Dir(cfgPath)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ck, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			raw := map[string]any{}
			data, err := os.ReadFile(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &raw); err != nil {
				t.Fatal(err)
			}
			set, err := tensor.OpenSafetensorsDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()

			last := strconv.Itoa(len(ck.Layers) - 1)
			checks := []struct {
				path    string
				got     *Linear
				in      int
				isEmbed bool
			}{
				{"model.embed_tokens", nil, ck.Config.HiddenSize, true},
				{"model.layers.0.self_attn.q_proj", ck.Layers[0].Q, ck.Config.HiddenSize, false},
				{"model.layers.0.mlp.down_proj", ck.Layers[0].Down, ck.Config.IntermediateSize, false},
				{"model.layers." + last + ".self_attn.v_proj", ck.Layers[len(ck.Layers)-1].V, ck.Config.HiddenSize, false},
			}
			if ck.Head != nil {
				checks = append(checks, struct {
					path    string
					got     *Linear
					in      int
					isEmbed bool
				}{"lm_head", ck.Head, ck.Config.HiddenSize, false})
			}
			q, _ := raw["quantization"].(map[string]any)
			for _, c := range checks {
				gotQ, gotP := ck.Embed.Quantized, ck.Embed.Params
				if !c.isEmbed {
					gotQ, gotP = c.got.Quantized, c.got.Params
				}
				wantQ, wantP := expectedQuant(t, q, set, c.path, c.in)
				if gotQ != wantQ || gotP != wantP {
					t.Errorf("got quantized %v %v, want %v %v (%s, %s)", gotQ, gotP, wantQ, wantP, dir, c.path)
				}
			}
		})
	}
}

// expectedQuant reads what config.json's quantization block says about path:
// a dict gives its params (mode defaulting to affine), false none, true the
// globals; an unlisted layer is quantized iff <path>.scales exists, with bits
// and group size read off the stored shapes.
func expectedQuant(t *testing.T, q map[string]any, set *tensor.SafetensorsSet, path string, in int) (bool, QuantParams) {
	t.Helper()
	if q == nil {
		return false, QuantParams{}
	}
	num := func(m map[string]any, k string) int {
		f, ok := m[k].(float64)
		if !ok {
			t.Fatalf("quantization %s: %q is %v, want a number", path, k, m[k])
		}
		return int(f)
	}
	global := QuantParams{num(q, "group_size"), num(q, "bits"), "affine"}
	if m, ok := q["mode"].(string); ok {
		global.Mode = m
	}
	switch v := q[path].(type) {
	case bool:
		if v {
			return true, global
		}
		return false, QuantParams{}
	case map[string]any:
		p := QuantParams{num(v, "group_size"), num(v, "bits"), "affine"}
		if m, ok := v["mode"].(string); ok {
			p.Mode = m
		}
		return true, p
	}
	s, _, ok := set.Info(path + ".scales")
	if !ok {
		return false, QuantParams{}
	}
	w, _, _ := set.Info(path + ".weight")
	return true, QuantParams{in / s.Shape[1], w.Shape[1] * 32 / in, "affine"}
}
