package checkpoint

import (
	"reflect"
	"testing"
)

func quantConfig(q map[string]any) map[string]any {
	m := baseConfig()
	m["tie_word_embeddings"] = false
	m["quantization"] = q
	return m
}

func TestResolve(t *testing.T) {
	m := quantConfig(map[string]any{
		"group_size": 64, "bits": 4, "mode": "affine",
		"model.layers.0.mlp.down_proj":    map[string]any{"group_size": 64, "bits": 8, "mode": "affine"},
		"model.layers.1.mlp.down_proj":    map[string]any{"group_size": 32, "bits": 6}, // mode missing: affine
		"model.layers.0.self_attn.v_proj": false,
		"model.layers.1.self_attn.v_proj": true,
		"model.layers.2.self_attn.v_proj": map[string]any{},          // falsy dict: unquantized
		"model.layers.2.self_attn.k_proj": nil,                       // falsy: unquantized
		"model.layers.2.mlp.up_proj":      map[string]any{"bits": 8}, // group_size from the affine default 64
		"lm_head":                         map[string]any{"group_size": 128, "bits": 8},
	})
	c, err := parse(t, m)
	if err != nil {
		t.Fatal(err)
	}
	q := c.Quantization
	if q == nil {
		t.Fatal("got no Quantization, want one")
	}
	def := QuantParams{64, 4, "affine"}
	cases := []struct {
		path      string
		hasScales bool
		want      QuantParams
		wantQ     bool
	}{
		{"model.layers.0.mlp.down_proj", true, QuantParams{64, 8, "affine"}, true},
		{"model.layers.0.mlp.down_proj", false, QuantParams{64, 8, "affine"}, true}, // listed: scales do not matter
		{"model.layers.1.mlp.down_proj", true, QuantParams{32, 6, "affine"}, true},
		{"model.layers.0.self_attn.v_proj", true, QuantParams{}, false},
		{"model.layers.1.self_attn.v_proj", false, def, true},
		{"model.layers.2.self_attn.v_proj", true, QuantParams{}, false},
		{"model.layers.2.self_attn.k_proj", true, QuantParams{}, false},
		{"model.layers.2.mlp.up_proj", true, QuantParams{64, 8, "affine"}, true},
		{"lm_head", true, QuantParams{128, 8, "affine"}, true},
		{"model.layers.0.self_attn.q_proj", true, def, true},
		{"model.layers.0.self_attn.q_proj", false, QuantParams{}, false},
		{"model.embed_tokens", true, def, true},
		{"model.embed_tokens", false, QuantParams{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			p, isQ := q.Resolve(tc.path, tc.hasScales)
			if p != tc.want || isQ != tc.wantQ {
				t.Fatalf("got %v %v, want %v %v (%s, hasScales %v)", p, isQ, tc.want, tc.wantQ, tc.path, tc.hasScales)
			}
		})
	}
	var none *Quantization
	if p, isQ := none.Resolve("model.layers.0.self_attn.q_proj", true); isQ || p != (QuantParams{}) {
		t.Fatalf("nil Quantization: got %v %v, want unquantized", p, isQ)
	}
}

func TestQuantizationParse(t *testing.T) {
	cases := []struct {
		name      string
		edit      func(m map[string]any)
		wantDef   QuantParams
		wantRules int
		warnings  int
	}{
		{"global_only", func(m map[string]any) { m["quantization"] = map[string]any{"group_size": 32, "bits": 8} }, QuantParams{32, 8, "affine"}, 0, 0},
		{"wins_over_quantization_config", func(m map[string]any) {
			m["quantization"] = map[string]any{"group_size": 64, "bits": 4}
			m["quantization_config"] = map[string]any{"quant_method": "awq"}
		}, QuantParams{64, 4, "affine"}, 0, 0},
		{"unknown_path_warned", func(m map[string]any) {
			m["quantization"] = map[string]any{"group_size": 64, "bits": 4, "model.layers.9.mlp.up_proj": map[string]any{"bits": 7}}
		}, QuantParams{64, 4, "affine"}, 0, 1},
		{"non_canonical_index_warned", func(m map[string]any) {
			m["quantization"] = map[string]any{"group_size": 64, "bits": 4, "model.layers.01.mlp.up_proj": false}
		}, QuantParams{64, 4, "affine"}, 0, 1},
		{"tied_lm_head_ignored", func(m map[string]any) {
			m["tie_word_embeddings"] = true
			m["quantization"] = map[string]any{"group_size": 64, "bits": 4, "lm_head": map[string]any{"bits": 8}}
		}, QuantParams{64, 4, "affine"}, 0, 1},
		{"norm_false_ok", func(m map[string]any) {
			m["quantization"] = map[string]any{"group_size": 64, "bits": 4, "model.norm": false}
		}, QuantParams{64, 4, "affine"}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := quantConfig(nil)
			tc.edit(m)
			c, err := parse(t, m)
			if err != nil {
				t.Fatal(err)
			}
			q := c.Quantization
			if q == nil || q.Default != tc.wantDef || len(q.Layers) != tc.wantRules || len(c.Warnings) != tc.warnings {
				t.Fatalf("got %+v with warnings %q, want default %v, %d rules, %d warnings (%s)", q, c.Warnings, tc.wantDef, tc.wantRules, tc.warnings, tc.name)
			}
		})
	}

	// No quantization block: nothing quantized; an unknown quant_method is a no-op in mlx_lm.
	for _, qc := range []any{nil, map[string]any{}, map[string]any{"quant_method": "something_new"}} {
		m := baseConfig()
		if qc != nil {
			m["quantization_config"] = qc
		}
		c, err := parse(t, m)
		if err != nil || c.Quantization != nil {
			t.Fatalf("quantization_config %v: got %v, %v, want nil Quantization and no error", qc, c, err)
		}
	}
}

func TestQuantizationErrors(t *testing.T) {
	layer := "model.layers.1.mlp.down_proj"
	withLayer := func(v any) func(m map[string]any) {
		return func(m map[string]any) {
			m["quantization"] = map[string]any{"group_size": 64, "bits": 4, layer: v}
		}
	}
	cases := []struct {
		name string
		edit func(m map[string]any)
		subs []string
	}{
		{"layer_bits_7", withLayer(map[string]any{"group_size": 64, "bits": 7}), []string{layer, "bits 7"}},
		{"layer_group_48", withLayer(map[string]any{"group_size": 48, "bits": 4}), []string{layer, "group_size 48"}},
		{"layer_mode_mxfp4", withLayer(map[string]any{"group_size": 32, "bits": 4, "mode": "mxfp4"}), []string{layer, "mxfp4"}},
		{"layer_mode_unknown", withLayer(map[string]any{"mode": "fancy"}), []string{layer, "fancy"}},
		{"layer_unknown_key", withLayer(map[string]any{"bits": 4, "scale": 2}), []string{layer, "scale"}},
		{"layer_quantize_input", withLayer(map[string]any{"bits": 4, "quantize_input": true}), []string{layer, "quantize_input"}},
		{"layer_number", withLayer(8), []string{layer, "number 8"}},
		{"norm_true", func(m map[string]any) {
			m["quantization"] = map[string]any{"group_size": 64, "bits": 4, "model.layers.0.input_layernorm": true}
		}, []string{"model.layers.0.input_layernorm", "cannot be quantized"}},
		{"global_bits_7", func(m map[string]any) { m["quantization"] = map[string]any{"group_size": 64, "bits": 7} }, []string{"quantization", "bits 7"}},
		{"global_group_48", func(m map[string]any) { m["quantization"] = map[string]any{"group_size": 48, "bits": 4} }, []string{"quantization", "group_size 48"}},
		{"global_mode_nvfp4", func(m map[string]any) {
			m["quantization"] = map[string]any{"group_size": 16, "bits": 4, "mode": "nvfp4"}
		}, []string{"quantization", "nvfp4"}},
		{"global_missing_bits", func(m map[string]any) { m["quantization"] = map[string]any{"group_size": 64} }, []string{"quantization.bits", "missing"}},
		{"global_not_object", func(m map[string]any) { m["quantization"] = 4 }, []string{"quantization"}},
		{"awq", func(m map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "awq", "bits": 4} }, []string{"quantization_config.quant_method", "awq", "unsupported"}},
		{"gptq_nested", func(m map[string]any) {
			m["text_config"] = map[string]any{"quantization_config": map[string]any{"quant_method": "gptq"}}
		}, []string{"text_config.quantization_config.quant_method", "gptq", "unsupported"}},
		{"mxfp4", func(m map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "mxfp4"} }, []string{"mxfp4", "unsupported"}},
		{"bitnet", func(m map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "bitnet"} }, []string{"bitnet", "unsupported"}},
		{"compressed_tensors", func(m map[string]any) {
			m["quantization_config"] = map[string]any{"quant_method": "compressed-tensors"}
		}, []string{"compressed-tensors", "unsupported"}},
		{"config_without_method", func(m map[string]any) {
			m["quantization_config"] = map[string]any{"group_size": 64, "bits": 4}
		}, []string{"quantization_config", "quant_method"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := quantConfig(nil)
			delete(m, "quantization")
			tc.edit(m)
			_, err := parse(t, m)
			wantErr(t, err, append([]string{"config.json"}, tc.subs...)...)
		})
	}
}

func TestInferParams(t *testing.T) {
	cases := []struct {
		name             string
		in, wCols, sCols int
		float            bool
		want             QuantParams
		errSub           string
	}{
		// bits = wCols*32/in, group = in/sCols.
		{"b4g64", 1536, 192, 24, true, QuantParams{64, 4, "affine"}, ""},
		{"b8g64", 1536, 384, 24, true, QuantParams{64, 8, "affine"}, ""},
		{"b3g32", 256, 24, 8, true, QuantParams{32, 3, "affine"}, ""},
		{"b7", 256, 56, 4, true, QuantParams{}, "bits 7"},
		{"g48", 192, 24, 4, true, QuantParams{}, "group_size 48"},
		{"uint8_scales", 256, 32, 8, false, QuantParams{}, "uint8"},
		{"zero_scales", 256, 32, 0, true, QuantParams{}, "scale columns"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := InferParams("model.layers.0.mlp.up_proj", tc.in, tc.wCols, tc.sCols, tc.float)
			if tc.errSub != "" {
				wantErr(t, err, "model.layers.0.mlp.up_proj", tc.errSub)
				return
			}
			if err != nil || !reflect.DeepEqual(p, tc.want) {
				t.Fatalf("got %v, %v, want %v (%s)", p, err, tc.want, tc.name)
			}
		})
	}
}
