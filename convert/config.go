package convert

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/mlxgo/mlxgo/gguf"
)

// meta reads typed metadata with errors that name the file and key.
type meta struct{ f *gguf.File }

func (m meta) errf(key, format string, a ...any) error {
	return fmt.Errorf("gguf %s: metadata %s: "+format, append([]any{m.f.Path, key}, a...)...)
}

// posInt returns a required (def < 0) or optional positive integer.
func (m meta) posInt(key string, def int64) (int64, error) {
	v, ok, err := m.f.Int(key)
	switch {
	case err != nil:
		return 0, err
	case !ok && def < 0:
		return 0, m.errf(key, "missing (required for a llama model)")
	case !ok:
		return def, nil
	case v <= 0 || v > math.MaxInt32:
		return 0, m.errf(key, "got %d, want a positive integer below 2^31", v)
	}
	return v, nil
}

// f32Number renders a float32 metadata value as the shortest decimal that
// reads back to the same float32 (1e-05, not 9.999999747378752e-06): MLX
// computes with the float32 anyway.
func f32Number(v float64) json.Number {
	return json.Number(strconv.FormatFloat(v, 'g', -1, 32))
}

// llamaConfig is what config.json needs from the metadata, plus the head
// counts the q/k permutation needs.
type llamaConfig struct {
	json           map[string]any
	nHead, nHeadKV int
}

// buildConfig maps the llama.* metadata to Hugging Face config.json keys.
// tied says whether output.weight is absent.
func buildConfig(f *gguf.File, tied bool, vocabRows int) (*llamaConfig, error) {
	m := meta{f}
	arch, ok, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, m.errf("general.architecture", "missing")
	}
	if arch != "llama" {
		return nil, m.errf("general.architecture", "%q is not supported; mlxgo converts llama-architecture GGUF files only", arch)
	}
	p := arch + "."
	c := map[string]any{
		"model_type":          "llama",
		"architectures":       []string{"LlamaForCausalLM"},
		"tie_word_embeddings": tied,
		"rope_traditional":    false,
		"attention_bias":      false,
		"mlp_bias":            false,
	}
	ints := []struct {
		key, hf string
		def     int64
	}{
		{p + "embedding_length", "hidden_size", -1},
		{p + "block_count", "num_hidden_layers", -1},
		{p + "feed_forward_length", "intermediate_size", -1},
		{p + "attention.head_count", "num_attention_heads", -1},
	}
	got := map[string]int64{}
	for _, r := range ints {
		v, err := m.posInt(r.key, r.def)
		if err != nil {
			return nil, err
		}
		got[r.hf] = v
		c[r.hf] = v
	}
	nHead := got["num_attention_heads"]
	nKV, err := m.posInt(p+"attention.head_count_kv", nHead)
	if err != nil {
		return nil, err
	}
	if nHead%nKV != 0 {
		return nil, m.errf(p+"attention.head_count_kv", "%d does not divide the head count %d", nKV, nHead)
	}
	c["num_key_value_heads"] = nKV
	hidden := got["hidden_size"]
	headDim, err := m.posInt(p+"attention.key_length", hidden/nHead)
	if err != nil {
		return nil, err
	}
	if vl, err := m.posInt(p+"attention.value_length", headDim); err != nil {
		return nil, err
	} else if vl != headDim {
		return nil, m.errf(p+"attention.value_length", "%d differs from the key length %d; a llama model has one head_dim", vl, headDim)
	}
	if rot, err := m.posInt(p+"rope.dimension_count", headDim); err != nil {
		return nil, err
	} else if rot != headDim {
		return nil, m.errf(p+"rope.dimension_count", "%d differs from head_dim %d: partial rotary embeddings are not a llama config", rot, headDim)
	}
	c["head_dim"] = headDim

	vocab, err := m.posInt(p+"vocab_size", int64(vocabRows))
	if err != nil {
		return nil, err
	}
	if vocab != int64(vocabRows) {
		return nil, m.errf(p+"vocab_size", "%d, but token_embd.weight has %d rows", vocab, vocabRows)
	}
	c["vocab_size"] = vocab
	if ctx, err := m.posInt(p+"context_length", 0); err != nil {
		return nil, err
	} else if ctx > 0 {
		c["max_position_embeddings"] = ctx
	}

	eps, ok, err := f.Float(p + "attention.layer_norm_rms_epsilon")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, m.errf(p+"attention.layer_norm_rms_epsilon", "missing (required for a llama model)")
	}
	if !(eps > 0) || math.IsInf(eps, 0) {
		return nil, m.errf(p+"attention.layer_norm_rms_epsilon", "got %v, want a finite number > 0", eps)
	}
	c["rms_norm_eps"] = f32Number(eps)
	theta, ok, err := f.Float(p + "rope.freq_base")
	if err != nil {
		return nil, err
	}
	if !ok {
		theta = 10000
	}
	if !(theta > 0) || math.IsInf(theta, 0) {
		return nil, m.errf(p+"rope.freq_base", "got %v, want a finite number > 0", theta)
	}
	c["rope_theta"] = f32Number(theta)
	if err := ropeScaling(m, p, c); err != nil {
		return nil, err
	}
	for _, r := range []struct{ key, hf string }{
		{"tokenizer.ggml.bos_token_id", "bos_token_id"},
		{"tokenizer.ggml.eos_token_id", "eos_token_id"},
	} {
		v, ok, err := f.Int(r.key)
		if err != nil {
			return nil, err
		}
		if ok {
			if v < 0 || v >= vocab {
				return nil, m.errf(r.key, "%d is not a token id (vocabulary of %d)", v, vocab)
			}
			c[r.hf] = v
		}
	}
	return &llamaConfig{json: c, nHead: int(nHead), nHeadKV: int(nKV)}, nil
}

// ropeScaling maps rope.scaling.* to rope_scaling; "none" or absent adds
// nothing. Only linear scaling maps to a llama config here.
func ropeScaling(m meta, p string, c map[string]any) error {
	key := p + "rope.scaling.type"
	typ, ok, err := m.f.String(key)
	if err != nil || !ok || typ == "none" {
		return err
	}
	if typ != "linear" {
		return m.errf(key, "%q is not supported (only linear RoPE scaling converts; llama3 scaling is stored as rope_freqs.weight, which is not supported either)", typ)
	}
	factor, ok, err := m.f.Float(p + "rope.scaling.factor")
	if err != nil {
		return err
	}
	if !ok || !(factor > 0) {
		return m.errf(p+"rope.scaling.factor", "missing or not > 0 (required by linear scaling)")
	}
	c["rope_scaling"] = map[string]any{"type": "linear", "factor": f32Number(factor)}
	return nil
}
