package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadConfig: any config.json and generation_config.json either load or fail with an
// error naming one of the two files; nothing panics, and no size from them is allocated
// unchecked.
func FuzzLoadConfig(f *testing.F) {
	for _, dir := range []string{"../conformance/testdata/models/q4g64-bf16", "../conformance/testdata/models/llama3rope-f32",
		"../conformance/testdata/models/optiq-bf16", "../conformance/testdata/real/smollm2"} {
		cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			continue // a seed directory without a config.json (real/smollm2 may hold only a GGUF)
		}
		gen, _ := os.ReadFile(filepath.Join(dir, "generation_config.json"))
		f.Add(cfg, gen)
	}
	base := `{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "rms_norm_eps": 1e-5, "vocab_size": 100, "eos_token_id": 2}`
	f.Add([]byte(base), []byte(`{"eos_token_id": -7}`))
	f.Add([]byte(base), []byte(`{"eos_token_id": "abc"}`))
	f.Add([]byte(base), []byte(`{"eos_token_id": `))
	f.Add([]byte(strings.Replace(base, `"eos_token_id": 2`, `"eos_token_id": -7`, 1)), []byte(nil))
	f.Add([]byte(strings.Replace(base, `"vocab_size": 100`, `"vocab_size": 100, "head_dim": 1073741824, "rope_scaling": {"type": "longrope", "long_factor": 1.0, "short_factor": 1.0, "original_max_position_embeddings": 4}`, 1)), []byte(nil))
	f.Add([]byte(strings.Replace(base, `"num_hidden_layers": 2`, `"num_hidden_layers": 1000000000`, 1)), []byte(nil))
	f.Add([]byte(strings.Replace(base, `"vocab_size": 100`, `"vocab_size": 100, "quantization": {"group_size": 64, "bits": 4, "model.layers.0.mlp": {"bits": 8}}`, 1)), []byte(nil))
	f.Fuzz(func(t *testing.T, cfg, gen []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		if len(gen) > 0 {
			if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), gen, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c, err := LoadConfig(dir)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if c.NumHiddenLayers > maxLayers || c.HeadDim > maxHeadDim || len(c.LayerTypes) != c.NumHiddenLayers {
			t.Fatalf("accepted layers %d, head_dim %d, %d layer types", c.NumHiddenLayers, c.HeadDim, len(c.LayerTypes))
		}
		for _, id := range c.EOSTokenIDs {
			if id < 0 {
				t.Fatalf("accepted eos_token_id %d", id)
			}
		}
	})
}

// FuzzParseConfig is FuzzLoadConfig without files, for speed: any config.json bytes parse or
// fail with an error naming the source.
func FuzzParseConfig(f *testing.F) {
	for _, dir := range []string{"../conformance/testdata/models/q4g64-bf16", "../conformance/testdata/models/llama3rope-f32",
		"../conformance/testdata/models/optiq-bf16"} {
		if cfg, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
			f.Add(cfg)
		}
	}
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "rms_norm_eps": 1e-5, "vocab_size": 100, "eos_token_id": [2, -7], "head_dim": 1073741824}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "fuzz/config.json")
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz/config.json") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if c.NumHiddenLayers > maxLayers || c.HeadDim > maxHeadDim || len(c.LayerTypes) != c.NumHiddenLayers {
			t.Fatalf("accepted layers %d, head_dim %d, %d layer types", c.NumHiddenLayers, c.HeadDim, len(c.LayerTypes))
		}
	})
}
