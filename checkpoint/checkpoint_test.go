package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// synth is a small synthetic checkpoint: hidden 64, 2 layers, intermediate
// 128, 4 heads of 16 (2 KV heads), vocab 32, untied, affine g32 b4 by
// default with model.layers.0.mlp.down_proj at 8 bits (listed), and
// model.layers.1.self_attn.v_proj unquantized (listed false).
type synth struct {
	cfg     map[string]any
	tensors map[string]*tensor.Dense
}

const (
	sHidden, sLayers, sInter, sHeads, sKV, sHeadDim, sVocab = 64, 2, 128, 4, 2, 16, 32
)

func newSynth() *synth {
	s := &synth{
		cfg: map[string]any{
			"model_type": "llama", "hidden_size": sHidden, "num_hidden_layers": sLayers,
			"intermediate_size": sInter, "num_attention_heads": sHeads, "num_key_value_heads": sKV,
			"head_dim": sHeadDim, "vocab_size": sVocab, "rms_norm_eps": 1e-6,
			"tie_word_embeddings": false,
			"quantization": map[string]any{
				"group_size": 32, "bits": 4, "mode": "affine",
				"model.layers.0.mlp.down_proj":    map[string]any{"group_size": 32, "bits": 8, "mode": "affine"},
				"model.layers.1.self_attn.v_proj": false,
			},
		},
		tensors: map[string]*tensor.Dense{},
	}
	s.quant("model.embed_tokens", sVocab, sHidden, 4, 32)
	for i := 0; i < sLayers; i++ {
		p := "model.layers." + strconv.Itoa(i) + "."
		s.quant(p+"self_attn.q_proj", sHeads*sHeadDim, sHidden, 4, 32)
		s.quant(p+"self_attn.k_proj", sKV*sHeadDim, sHidden, 4, 32)
		if i == 1 {
			s.float(p+"self_attn.v_proj.weight", sKV*sHeadDim, sHidden)
		} else {
			s.quant(p+"self_attn.v_proj", sKV*sHeadDim, sHidden, 4, 32)
		}
		s.quant(p+"self_attn.o_proj", sHidden, sHeads*sHeadDim, 4, 32)
		s.quant(p+"mlp.gate_proj", sInter, sHidden, 4, 32)
		s.quant(p+"mlp.up_proj", sInter, sHidden, 4, 32)
		bits := 4
		if i == 0 {
			bits = 8
		}
		s.quant(p+"mlp.down_proj", sHidden, sInter, bits, 32)
		s.float(p+"input_layernorm.weight", sHidden)
		s.float(p+"post_attention_layernorm.weight", sHidden)
	}
	s.float("model.norm.weight", sHidden)
	s.quant("lm_head", sVocab, sHidden, 4, 32)
	return s
}

func (s *synth) float(name string, shape ...int) {
	s.tensors[name] = tensor.New(tensor.BF16, tensor.Shape(shape))
}

func (s *synth) quant(path string, out, in, bits, group int) {
	s.tensors[path+".weight"] = tensor.New(tensor.U32, tensor.Shape{out, in * bits / 32})
	s.tensors[path+".scales"] = tensor.New(tensor.BF16, tensor.Shape{out, in / group})
	s.tensors[path+".biases"] = tensor.New(tensor.BF16, tensor.Shape{out, in / group})
}

func (s *synth) quantMap() map[string]any { return s.cfg["quantization"].(map[string]any) }

func (s *synth) write(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data, err := json.Marshal(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(s.tensors))
	for n := range s.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	ts := make([]*tensor.Dense, len(names))
	for i, n := range names {
		ts[i] = s.tensors[n]
	}
	if err := tensor.WriteSafetensors(filepath.Join(dir, "model.safetensors"), names, ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func open(t *testing.T, s *synth) (*Checkpoint, string, error) {
	t.Helper()
	dir := s.write(t)
	ck, err := Open(dir)
	if err == nil {
		t.Cleanup(func() { ck.Close() })
	}
	return ck, dir, err
}

func TestOpenSynthetic(t *testing.T) {
	s := newSynth()
	s.float("model.layers.0.self_attn.rotary_emb.inv_freq", sHeadDim/2) // dropped by sanitize
	ck, dir, err := open(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Dir != dir || ck.DType != tensor.BF16 || len(ck.Layers) != sLayers || ck.Head == nil || len(ck.Warnings) != 0 {
		t.Fatalf("got dir %s dtype %v layers %d head %v warnings %q, want %s BF16 %d non-nil none", ck.Dir, ck.DType, len(ck.Layers), ck.Head, ck.Warnings, dir, sLayers)
	}
	b4, b8 := QuantParams{32, 4, "affine"}, QuantParams{32, 8, "affine"}
	cases := []struct {
		name      string
		lin       *Linear
		in, out   int
		quantized bool
		params    QuantParams
		wCols     int
	}{
		{"l0.q", ck.Layers[0].Q, sHidden, sHeads * sHeadDim, true, b4, sHidden * 4 / 32},
		{"l0.down", ck.Layers[0].Down, sInter, sHidden, true, b8, sInter * 8 / 32},
		{"l1.down", ck.Layers[1].Down, sInter, sHidden, true, b4, sInter * 4 / 32},
		{"l1.v", ck.Layers[1].V, sHidden, sKV * sHeadDim, false, QuantParams{}, sHidden},
		{"l1.o", ck.Layers[1].O, sHeads * sHeadDim, sHidden, true, b4, sHeads * sHeadDim * 4 / 32},
		{"head", ck.Head, sHidden, sVocab, true, b4, sHidden * 4 / 32},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.lin
			if l.In != tc.in || l.Out != tc.out || l.Quantized != tc.quantized || l.Params != tc.params ||
				l.Weight.Shape[1] != tc.wCols || (l.Scales != nil) != tc.quantized || l.Bias != nil {
				t.Fatalf("got %+v, want in %d out %d quantized %v %v weight cols %d (%s)", l, tc.in, tc.out, tc.quantized, tc.params, tc.wCols, tc.name)
			}
		})
	}
	e := ck.Embed
	if !e.Quantized || e.Params != b4 || e.Vocab != sVocab || e.Dim != sHidden || ck.Norm.Shape[0] != sHidden {
		t.Fatalf("got embed %+v norm %v, want quantized %v [%d %d]", e, ck.Norm.Shape, b4, sVocab, sHidden)
	}
	if err := ck.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenVariants(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(s *synth)
		check func(ck *Checkpoint) (ok bool, what string)
	}{
		{"tied_drops_lm_head_weight", func(s *synth) {
			s.cfg["tie_word_embeddings"] = true
			delete(s.tensors, "lm_head.scales")
			delete(s.tensors, "lm_head.biases")
		}, func(ck *Checkpoint) (bool, string) {
			return ck.Head == nil && len(ck.Warnings) == 1 && strings.Contains(ck.Warnings[0], "lm_head.weight"), "no head, one warning about lm_head.weight"
		}},
		{"tie_default_true", func(s *synth) {
			delete(s.cfg, "tie_word_embeddings")
			for _, n := range []string{"lm_head.weight", "lm_head.scales", "lm_head.biases"} {
				delete(s.tensors, n)
			}
		}, func(ck *Checkpoint) (bool, string) {
			return ck.Head == nil && len(ck.Warnings) == 0, "no head, no warning"
		}},
		{"unlisted_inferred_8bit", func(s *synth) { s.quant("model.layers.1.mlp.up_proj", sInter, sHidden, 8, 64) },
			func(ck *Checkpoint) (bool, string) {
				return ck.Layers[1].Up.Params == QuantParams{64, 8, "affine"}, "layers.1.up inferred affine b8 g64"
			}},
		{"unlisted_unquantized", func(s *synth) {
			delete(s.tensors, "model.layers.1.mlp.up_proj.scales")
			delete(s.tensors, "model.layers.1.mlp.up_proj.biases")
			s.float("model.layers.1.mlp.up_proj.weight", sInter, sHidden)
		}, func(ck *Checkpoint) (bool, string) { return !ck.Layers[1].Up.Quantized, "layers.1.up unquantized" }},
		{"biases_present", func(s *synth) {
			s.cfg["attention_bias"], s.cfg["mlp_bias"] = true, true
			for i := 0; i < sLayers; i++ {
				p := "model.layers." + strconv.Itoa(i) + "."
				s.float(p+"self_attn.q_proj.bias", sHeads*sHeadDim)
				s.float(p+"self_attn.k_proj.bias", sKV*sHeadDim)
				s.float(p+"self_attn.v_proj.bias", sKV*sHeadDim)
				s.float(p+"self_attn.o_proj.bias", sHidden)
				s.float(p+"mlp.gate_proj.bias", sInter)
				s.float(p+"mlp.up_proj.bias", sInter)
				s.float(p+"mlp.down_proj.bias", sHidden)
			}
		}, func(ck *Checkpoint) (bool, string) {
			return ck.Layers[1].V.Bias != nil && ck.Layers[0].Down.Bias.Shape[0] == sHidden, "biases loaded"
		}},
		{"f32_norm_warned", func(s *synth) {
			s.tensors["model.norm.weight"] = tensor.New(tensor.F32, tensor.Shape{sHidden})
		}, func(ck *Checkpoint) (bool, string) {
			return ck.DType == tensor.BF16 && len(ck.Warnings) == 1 && strings.Contains(ck.Warnings[0], "F32") && strings.Contains(ck.Warnings[0], "model.norm.weight"),
				"DType BF16 and one warning naming F32 model.norm.weight"
		}},
		{"unquantized_model", func(s *synth) {
			delete(s.cfg, "quantization")
			for n := range s.tensors {
				if strings.HasSuffix(n, ".scales") || strings.HasSuffix(n, ".biases") {
					delete(s.tensors, n)
				}
			}
			for n, d := range s.tensors {
				if d.DType == tensor.U32 {
					s.tensors[n] = tensor.New(tensor.F16, tensor.Shape{d.Shape[0], d.Shape[1] * 32 / bitsOf(n)})
				}
			}
			for n, d := range s.tensors {
				if d.DType == tensor.BF16 {
					s.tensors[n] = tensor.New(tensor.F16, d.Shape)
				}
			}
		}, func(ck *Checkpoint) (bool, string) {
			return ck.DType == tensor.F16 && !ck.Embed.Quantized && !ck.Head.Quantized && ck.Config.Quantization == nil, "F16 unquantized"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth()
			tc.edit(s)
			ck, _, err := open(t, s)
			if err != nil {
				t.Fatal(err)
			}
			if ok, what := tc.check(ck); !ok {
				t.Fatalf("got %+v (warnings %q), want %s", ck, ck.Warnings, what)
			}
		})
	}
}

// bitsOf is the synthetic checkpoint's bits for a packed weight name.
func bitsOf(name string) int {
	if name == "model.layers.0.mlp.down_proj.weight" {
		return 8
	}
	return 4
}

func TestOpenCorruptions(t *testing.T) {
	down0 := "model.layers.0.mlp.down_proj"
	cases := []struct {
		name string
		edit func(s *synth)
		subs []string
	}{
		{"missing_scales", func(s *synth) { delete(s.tensors, "model.layers.1.mlp.up_proj.biases") },
			[]string{"missing tensor model.layers.1.mlp.up_proj.biases"}},
		{"missing_norm", func(s *synth) { delete(s.tensors, "model.layers.1.post_attention_layernorm.weight") },
			[]string{"missing tensor model.layers.1.post_attention_layernorm.weight"}},
		{"missing_lm_head", func(s *synth) {
			for _, n := range []string{"lm_head.weight", "lm_head.scales", "lm_head.biases"} {
				delete(s.tensors, n)
			}
		}, []string{"missing tensor lm_head.weight"}},
		{"missing_listed_scales", func(s *synth) {
			delete(s.tensors, down0+".scales")
		}, []string{"missing tensor " + down0 + ".scales", "b8"}},
		{"extra_tensor", func(s *synth) { s.float("model.layers.0.self_attn.extra.weight", 4) },
			[]string{"unexpected tensor model.layers.0.self_attn.extra.weight"}},
		{"extra_layer", func(s *synth) { s.float("model.layers.2.input_layernorm.weight", sHidden) },
			[]string{"unexpected tensor model.layers.2.input_layernorm.weight"}},
		{"tied_lm_head_scales_extra", func(s *synth) { s.cfg["tie_word_embeddings"] = true },
			[]string{"unexpected tensor lm_head.biases", "lm_head.scales"}},
		{"scales_on_unquantized_layer", func(s *synth) {
			s.tensors["model.layers.1.self_attn.v_proj.scales"] = tensor.New(tensor.BF16, tensor.Shape{sKV * sHeadDim, 2})
		}, []string{"unexpected tensor model.layers.1.self_attn.v_proj.scales", "is false"}},
		{"packed_width_listed", func(s *synth) { s.quant(down0, sHidden, sInter, 4, 32) },
			[]string{down0 + ".weight", "shape [64 16]", "want [64 32]"}},
		{"packed_width_bits7_unlisted", func(s *synth) {
			s.tensors["model.layers.0.mlp.up_proj.weight"] = tensor.New(tensor.U32, tensor.Shape{sInter, sHidden * 7 / 32})
		}, []string{"model.layers.0.mlp.up_proj", "bits 7"}},
		{"scales_shape_listed", func(s *synth) {
			s.tensors[down0+".scales"] = tensor.New(tensor.BF16, tensor.Shape{sHidden, sInter / 64})
		}, []string{down0 + ".scales", "shape [64 2]", "want [64 4]"}},
		{"biases_shape", func(s *synth) {
			s.tensors["lm_head.biases"] = tensor.New(tensor.BF16, tensor.Shape{sVocab, 3})
		}, []string{"lm_head.biases", "shape [32 3]", "want [32 2]"}},
		{"config_bits_7", func(s *synth) { s.quantMap()[down0] = map[string]any{"group_size": 32, "bits": 7} },
			[]string{"config.json", down0, "bits 7"}},
		{"config_group_48", func(s *synth) { s.quantMap()[down0] = map[string]any{"group_size": 48, "bits": 8} },
			[]string{"config.json", down0, "group_size 48"}},
		{"in_not_multiple_of_group", func(s *synth) {
			s.quantMap()["model.layers.0.self_attn.o_proj"] = map[string]any{"group_size": 128, "bits": 4}
			s.quant("model.layers.0.self_attn.o_proj", sHidden, sHeads*sHeadDim, 4, 32)
		}, []string{"model.layers.0.self_attn.o_proj", "group_size 128"}},
		{"biases_dtype_mismatch", func(s *synth) {
			s.tensors["model.layers.1.mlp.gate_proj.biases"] = tensor.New(tensor.F16, tensor.Shape{sInter, sHidden / 32})
		}, []string{"model.layers.1.mlp.gate_proj.biases", "dtype F16", "want BF16"}},
		{"norm_not_float", func(s *synth) {
			s.tensors["model.norm.weight"] = tensor.New(tensor.I32, tensor.Shape{sHidden})
		}, []string{"model.norm.weight", "dtype I32"}},
		{"quantized_weight_float", func(s *synth) {
			s.tensors[down0+".weight"] = tensor.New(tensor.BF16, tensor.Shape{sHidden, sInter * 8 / 32})
		}, []string{down0 + ".weight", "dtype BF16", "want U32"}},
		{"unquantized_weight_shape", func(s *synth) {
			s.float("model.layers.1.self_attn.v_proj.weight", sKV*sHeadDim, sHidden/2)
		}, []string{"model.layers.1.self_attn.v_proj.weight", "shape [32 32]", "want [32 64]"}},
		{"missing_bias", func(s *synth) { s.cfg["attention_bias"] = true },
			[]string{"missing tensor model.layers.0.self_attn.q_proj.bias"}},
		{"uint8_scales_unlisted", func(s *synth) {
			s.tensors["model.layers.0.mlp.gate_proj.scales"] = tensor.New(tensor.U8, tensor.Shape{sInter, sHidden / 32})
		}, []string{"model.layers.0.mlp.gate_proj", "uint8"}},
		{"f64_norm", func(s *synth) {
			s.tensors["model.norm.weight"] = tensor.New(tensor.F64, tensor.Shape{sHidden})
		}, []string{"model.norm.weight", "dtype F64"}},
		{"minicpm", func(s *synth) { s.cfg["model_type"] = "minicpm" }, []string{"config.json", "model_type"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth()
			tc.edit(s)
			_, dir, err := open(t, s)
			subs := tc.subs
			if !strings.Contains(strings.Join(subs, " "), "config.json") {
				subs = append(subs, dir)
			}
			wantErr(t, err, subs...)
		})
	}
}

func TestOpenNoSafetensors(t *testing.T) {
	dir := t.TempDir()
	data, _ := json.Marshal(newSynth().cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	wantErr(t, err, dir, "safetensors")
}
