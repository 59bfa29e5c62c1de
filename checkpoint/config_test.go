package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// baseConfig is a minimal valid llama config.json (every required field).
func baseConfig() map[string]any {
	return map[string]any{
		"model_type":          "llama",
		"hidden_size":         1536,
		"num_hidden_layers":   3,
		"intermediate_size":   4608,
		"num_attention_heads": 16,
		"rms_norm_eps":        1e-5,
		"vocab_size":          1000,
	}
}

func parse(t *testing.T, m map[string]any) (*Config, error) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return ParseConfig(data, "testdir/config.json")
}

// wantErr fails unless err is non-nil and contains every substring.
func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not contain %q", err, s)
		}
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := parse(t, baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := struct {
		ModelType                   string
		HeadDim, KV, MaxPos, Window int
		Theta                       float64
		Tie, Trad, AttnB, MLPB      bool
		Scaling                     *RopeScaling
		Quant                       *Quantization
		LayerTypes                  []string
		Warnings                    int
		EOS                         []int
		BOS                         *int
	}{c.ModelType, c.HeadDim, c.NumKeyValueHeads, c.MaxPositionEmbeddings, c.SlidingWindow,
		c.RopeTheta, c.TieWordEmbeddings, c.RopeTraditional, c.AttentionBias, c.MLPBias,
		c.RopeScaling, c.Quantization, c.LayerTypes, len(c.Warnings), c.EOSTokenIDs, c.BOSTokenID}
	// head_dim = 1536 // 16 = 96; kv heads = heads = 16; tie defaults to true.
	want := got
	want.ModelType, want.HeadDim, want.KV, want.MaxPos, want.Window = "llama", 96, 16, 0, 0
	want.Theta, want.Tie, want.Trad, want.AttnB, want.MLPB = 10000, true, false, false, false
	want.Scaling, want.Quant, want.Warnings, want.EOS, want.BOS = nil, nil, 0, nil, nil
	want.LayerTypes = []string{"full_attention", "full_attention", "full_attention"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if c.HiddenSize != 1536 || c.NumHiddenLayers != 3 || c.IntermediateSize != 4608 ||
		c.NumAttentionHeads != 16 || c.VocabSize != 1000 || c.RMSNormEps != 1e-5 {
		t.Fatalf("required fields not copied: %+v", c)
	}
}

func TestParseConfigQuirks(t *testing.T) {
	one := 1
	cases := []struct {
		name  string
		edit  func(m map[string]any)
		check func(c *Config) (got, want any)
	}{
		{"head_dim_explicit", func(m map[string]any) { m["head_dim"] = 128 },
			func(c *Config) (any, any) { return c.HeadDim, 128 }},
		{"head_dim_null_derives", func(m map[string]any) { m["head_dim"] = nil },
			func(c *Config) (any, any) { return c.HeadDim, 96 }},
		{"kv_heads", func(m map[string]any) { m["num_key_value_heads"] = 2 },
			func(c *Config) (any, any) { return c.NumKeyValueHeads, 2 }},
		{"tie_false", func(m map[string]any) { m["tie_word_embeddings"] = false },
			func(c *Config) (any, any) { return c.TieWordEmbeddings, false }},
		{"tie_null_is_false", func(m map[string]any) { m["tie_word_embeddings"] = nil },
			func(c *Config) (any, any) { return c.TieWordEmbeddings, false }},
		{"mistral_remapped", func(m map[string]any) { m["model_type"] = "mistral" },
			func(c *Config) (any, any) { return c.ModelType, "llama" }},
		{"iquestcoder_remapped", func(m map[string]any) { m["model_type"] = "iquestcoder" },
			func(c *Config) (any, any) { return c.ModelType, "llama" }},
		{"rope_theta", func(m map[string]any) { m["rope_theta"] = 1e6 },
			func(c *Config) (any, any) { return c.RopeTheta, 1e6 }},
		{"biases_traditional", func(m map[string]any) {
			m["attention_bias"], m["mlp_bias"], m["rope_traditional"] = true, true, true
		}, func(c *Config) (any, any) {
			return []bool{c.AttentionBias, c.MLPBias, c.RopeTraditional}, []bool{true, true, true}
		}},
		{"eos_int", func(m map[string]any) { m["eos_token_id"] = 2 },
			func(c *Config) (any, any) { return c.EOSTokenIDs, []int{2} }},
		{"eos_list_bos", func(m map[string]any) { m["eos_token_id"] = []int{2, 73440}; m["bos_token_id"] = 1 },
			func(c *Config) (any, any) { return []any{c.EOSTokenIDs, *c.BOSTokenID}, []any{[]int{2, 73440}, one} }},
		{"unknown_keys_ignored", func(m map[string]any) {
			m["architectures"] = []string{"LlamaForCausalLM"}
			m["torch_dtype"] = "bfloat16"
		},
			func(c *Config) (any, any) { return len(c.Warnings), 0 }},
		{"layer_types_sliding", func(m map[string]any) {
			m["layer_types"] = []string{"sliding_attention", "full_attention", "sliding_attention"}
			m["sliding_window"] = 512
		}, func(c *Config) (any, any) {
			return []any{c.LayerTypes[0], c.LayerTypes[1], c.SlidingWindow}, []any{"sliding_attention", "full_attention", 512}
		}},
		{"rope_parameters_ignored", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_theta": 1e6, "rope_type": "default"}
		}, func(c *Config) (any, any) {
			ok := len(c.Warnings) == 1 && strings.Contains(c.Warnings[0], "rope_parameters") && strings.Contains(c.Warnings[0], "10000")
			return []any{c.RopeTheta, ok}, []any{10000.0, true}
		}},
		{"rope_parameters_with_top_level_theta", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_theta": 1e6}
			m["rope_theta"] = 5e5
		}, func(c *Config) (any, any) {
			ok := len(c.Warnings) == 1 && strings.Contains(c.Warnings[0], "rope_parameters") && strings.Contains(c.Warnings[0], "500000")
			return []any{c.RopeTheta, ok}, []any{5e5, true}
		}},
		{"rope_llama3_defaults", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8}
		}, func(c *Config) (any, any) {
			r := c.RopeScaling
			return []any{r.Type, r.Factor, r.LowFreqFactor, r.HighFreqFactor, r.OriginalMaxPositionEmbeddings},
				[]any{"llama3", 8.0, 1.0, 4.0, 8192}
		}},
		{"rope_yarn_defaults", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"type": "yarn", "factor": 4}
		}, func(c *Config) (any, any) {
			r := c.RopeScaling
			return []any{r.Factor, r.OriginalMaxPositionEmbeddings, r.BetaFast, r.BetaSlow, r.Mscale, r.MscaleAllDim},
				[]any{4.0, 4096, 32.0, 1.0, 1.0, 0.0}
		}},
		{"rope_type_key_wins_when_type_empty", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"type": "", "rope_type": "linear", "factor": 2}
		}, func(c *Config) (any, any) { return c.RopeScaling.Type, "linear" }},
		{"rope_longrope_scalar_factor", func(m map[string]any) {
			m["max_position_embeddings"] = 131072
			m["head_dim"] = 8
			m["rope_scaling"] = map[string]any{"type": "longrope", "original_max_position_embeddings": 4096,
				"short_factor": 1.0, "long_factor": []float64{1, 2, 3, 4}}
		}, func(c *Config) (any, any) {
			return []any{c.RopeScaling.LongFactor, c.RopeScaling.ShortFactor}, []any{[]float64{1, 2, 3, 4}, []float64{1, 1, 1, 1}}
		}},
		{"rope_proportional_defaults", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"rope_type": "proportional"}
		}, func(c *Config) (any, any) {
			return []any{c.RopeScaling.Factor, c.RopeScaling.PartialRotaryFactor}, []any{1.0, 1.0}
		}},
		{"rope_default_type", func(m map[string]any) { m["rope_scaling"] = map[string]any{} },
			func(c *Config) (any, any) { return c.RopeScaling.Type, "default" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := baseConfig()
			tc.edit(m)
			c, err := parse(t, m)
			if err != nil {
				t.Fatal(err)
			}
			got, want := tc.check(c)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v, want %v (%s)", got, want, tc.name)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(m map[string]any)
		subs []string
	}{
		{"minicpm", func(m map[string]any) { m["model_type"] = "minicpm" }, []string{"model_type", "muP"}},
		{"unknown_model_type", func(m map[string]any) { m["model_type"] = "qwen2" }, []string{"model_type", "qwen2"}},
		{"missing_model_type", func(m map[string]any) { delete(m, "model_type") }, []string{"model_type", "missing"}},
		{"missing_hidden", func(m map[string]any) { delete(m, "hidden_size") }, []string{"hidden_size", "missing"}},
		{"hidden_not_int", func(m map[string]any) { m["hidden_size"] = "big" }, []string{"hidden_size", "integer"}},
		{"hidden_fraction", func(m map[string]any) { m["hidden_size"] = 1536.5 }, []string{"hidden_size", "integer"}},
		{"hidden_zero", func(m map[string]any) { m["hidden_size"] = 0 }, []string{"hidden_size", "positive"}},
		{"layers_huge", func(m map[string]any) { m["num_hidden_layers"] = 1000000 }, []string{"num_hidden_layers", "65536"}},
		{"hidden_over_int32", func(m map[string]any) { m["hidden_size"] = 3000000000 }, []string{"hidden_size", "int32"}},
		{"layers_negative", func(m map[string]any) { m["num_hidden_layers"] = -1 }, []string{"num_hidden_layers"}},
		{"intermediate_zero", func(m map[string]any) { m["intermediate_size"] = 0 }, []string{"intermediate_size"}},
		{"heads_zero", func(m map[string]any) { m["num_attention_heads"] = 0 }, []string{"num_attention_heads"}},
		{"vocab_zero", func(m map[string]any) { m["vocab_size"] = 0 }, []string{"vocab_size"}},
		{"kv_zero", func(m map[string]any) { m["num_key_value_heads"] = 0 }, []string{"num_key_value_heads"}},
		{"kv_not_divisor", func(m map[string]any) { m["num_key_value_heads"] = 3 }, []string{"num_key_value_heads", "divide"}},
		{"head_dim_negative", func(m map[string]any) { m["head_dim"] = -8 }, []string{"head_dim"}},
		{"max_pos_zero", func(m map[string]any) { m["max_position_embeddings"] = 0 }, []string{"max_position_embeddings"}},
		{"eps_zero", func(m map[string]any) { m["rms_norm_eps"] = 0 }, []string{"rms_norm_eps"}},
		{"eps_negative", func(m map[string]any) { m["rms_norm_eps"] = -1e-6 }, []string{"rms_norm_eps"}},
		{"theta_zero", func(m map[string]any) { m["rope_theta"] = 0 }, []string{"rope_theta"}},
		{"theta_null", func(m map[string]any) { m["rope_theta"] = nil }, []string{"rope_theta"}},
		{"theta_inf_tagged", func(m map[string]any) { m["rope_theta"] = map[string]any{"__float__": "Infinity"} }, []string{"rope_theta"}},
		{"tie_string", func(m map[string]any) { m["tie_word_embeddings"] = "yes" }, []string{"tie_word_embeddings"}},
		{"rope_su", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "su", "factor": 2} }, []string{"rope_scaling.type", `"su"`}},
		{"rope_unknown", func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "ntk"} }, []string{"rope_scaling.type", "ntk"}},
		{"rope_linear_no_factor", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "linear"} }, []string{"rope_scaling.factor", "linear"}},
		{"rope_llama3_no_factor", func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "llama3"} }, []string{"rope_scaling.factor"}},
		{"rope_yarn_no_factor", func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "yarn"} }, []string{"rope_scaling.factor"}},
		{"rope_factor_zero", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "linear", "factor": 0} }, []string{"rope_scaling.factor"}},
		{"rope_dynamic_no_max_pos", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "dynamic", "factor": 2} }, []string{"max_position_embeddings"}},
		{"rope_longrope_no_orig", func(m map[string]any) {
			m["max_position_embeddings"] = 1000
			m["rope_scaling"] = map[string]any{"type": "longrope", "short_factor": 1, "long_factor": 1}
		}, []string{"rope_scaling.original_max_position_embeddings"}},
		{"rope_longrope_factor_len", func(m map[string]any) {
			m["max_position_embeddings"] = 1000
			m["rope_scaling"] = map[string]any{"type": "longrope", "original_max_position_embeddings": 100, "short_factor": 1, "long_factor": []int{1, 2, 3}}
		}, []string{"rope_scaling.long_factor", "48"}},
		{"rope_mrope_sections", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"type": "mrope", "mrope_section": []int{1, 2}}
		}, []string{"rope_scaling.mrope_section"}},
		{"rope_scaling_not_object", func(m map[string]any) { m["rope_scaling"] = 2 }, []string{"rope_scaling"}},
		{"layer_types_short", func(m map[string]any) { m["layer_types"] = []string{"full_attention"} }, []string{"layer_types", "num_hidden_layers"}},
		{"layer_types_unknown", func(m map[string]any) {
			m["layer_types"] = []string{"full_attention", "linear_attention", "full_attention"}
		}, []string{"layer_types", "linear_attention"}},
		{"layer_types_no_full", func(m map[string]any) {
			m["layer_types"] = []string{"sliding_attention", "sliding_attention", "sliding_attention"}
			m["sliding_window"] = 4
		}, []string{"layer_types", "full_attention"}},
		{"sliding_without_window", func(m map[string]any) {
			m["layer_types"] = []string{"sliding_attention", "full_attention", "full_attention"}
		}, []string{"sliding_window"}},
		{"eos_bad", func(m map[string]any) { m["eos_token_id"] = []any{1, "x"} }, []string{"eos_token_id"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := baseConfig()
			tc.edit(m)
			_, err := parse(t, m)
			wantErr(t, err, append([]string{"config.json"}, tc.subs...)...)
		})
	}
}

func TestParseConfigNotJSON(t *testing.T) {
	_, err := ParseConfig([]byte(`{"model_type": "llama",`), "x/config.json")
	wantErr(t, err, "x/config.json")
	_, err = ParseConfig([]byte(`[1, 2]`), "x/config.json")
	wantErr(t, err, "x/config.json", "object")
}

func TestLoadConfigGenerationEOS(t *testing.T) {
	cases := []struct {
		name     string
		gen      string // generation_config.json contents; "" means no file
		want     []int
		warnings int
	}{
		{"no_file", "", []int{2}, 0},
		{"override_int", `{"eos_token_id": 7}`, []int{7}, 0},
		{"override_list", `{"eos_token_id": [7, 8]}`, []int{7, 8}, 0},
		{"falsy_zero_keeps", `{"eos_token_id": 0}`, []int{2}, 0},
		{"falsy_empty_keeps", `{"eos_token_id": []}`, []int{2}, 0},
		{"absent_keeps", `{"do_sample": true}`, []int{2}, 0},
		{"broken_ignored", `{"eos_token_id": `, []int{2}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m := baseConfig()
			m["eos_token_id"] = 2
			data, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.gen != "" {
				if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(tc.gen), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.EOSTokenIDs, tc.want) || len(c.Warnings) != tc.warnings {
				t.Fatalf("got eos %v and %d warnings %q, want %v and %d (%s)", c.EOSTokenIDs, len(c.Warnings), c.Warnings, tc.want, tc.warnings, tc.name)
			}
		})
	}
	_, err := LoadConfig(t.TempDir())
	wantErr(t, err, "config.json")
}
