package synth

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/mlxgo/mlxgo/internal/atomicfile"
)

// Config returns the config.json mlx_lm's save_config would write for the
// spec: top-level keys sorted, the quantization block under both
// "quantization" and "quantization_config" (global group_size, bits, mode,
// then one entry per listed module in model order), Python's float repr,
// four-space indents.
func (s Spec) Config() string {
	cfg := obj{
		{"head_dim", s.HeadDim},
		{"hidden_size", s.Hidden},
		{"intermediate_size", s.Intermediate},
		{"max_position_embeddings", s.MaxPositions},
		{"model_type", "llama"},
		{"num_attention_heads", s.Heads},
		{"num_hidden_layers", s.Layers},
		{"num_key_value_heads", s.KVHeads},
	}
	if _, group, dense, _ := s.quant(); !dense {
		q := obj{{"group_size", group}, {"bits", s.globalBits()}, {"mode", "affine"}}
		for _, m := range s.Modules() {
			if !m.Listed {
				continue
			}
			e := obj{{"group_size", group}, {"bits", m.Bits}}
			if m.Mode {
				e = append(e, field{"mode", "affine"})
			}
			q = append(q, field{m.Path, e})
		}
		cfg = append(cfg, field{"quantization", q}, field{"quantization_config", q})
	}
	cfg = append(cfg,
		field{"rms_norm_eps", s.RMSNormEps},
		field{"rope_theta", s.RopeTheta},
		field{"tie_word_embeddings", s.Tied},
		field{"vocab_size", s.Vocab},
	)
	return pyJSON(cfg)
}

// safetensorsHeader returns the 8-byte length and the JSON header of the
// model.safetensors holding tensors in order (metadata {"format": "mlx"} as
// mx.save_safetensors writes it), padded with spaces to 8 bytes as
// tensor.WriteSafetensors pads, and the data size.
func safetensorsHeader(tensors []Tensor) ([]byte, int64) {
	var h bytes.Buffer
	h.WriteString(`{"__metadata__":{"format":"mlx"}`)
	var off int64
	for _, t := range tensors {
		key, _ := json.Marshal(t.Name)
		shape, _ := json.Marshal([]int(t.Shape))
		end := off + t.Bytes()
		fmt.Fprintf(&h, `,%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, key, t.DType, shape, off, end)
		off = end
	}
	h.WriteByte('}')
	for (8+h.Len())%8 != 0 {
		h.WriteByte(' ')
	}
	out := make([]byte, 8, 8+h.Len())
	binary.LittleEndian.PutUint64(out, uint64(h.Len()))
	return append(out, h.Bytes()...), off
}

// Index returns model.safetensors.index.json as mlx_lm's save_model writes
// it: total_size (data bytes), total_parameters, and the weight map sorted
// by name.
func (s Spec) Index() string {
	ts := s.Tensors()
	names := make([]string, len(ts))
	var size int64
	for i, t := range ts {
		names[i] = t.Name
		size += t.Bytes()
	}
	sort.Strings(names)
	wm := obj{}
	for _, n := range names {
		wm = append(wm, field{n, "model.safetensors"})
	}
	return pyJSON(obj{
		{"metadata", obj{{"total_size", size}, {"total_parameters", s.Parameters()}}},
		{"weight_map", wm},
	})
}

// WriteMLX writes the checkpoint into dir (created if needed): config.json,
// model.safetensors (streamed tensor by tensor), model.safetensors.index.json,
// and tokenizer.json / tokenizer_config.json (a word-level tokenizer of the
// spec's vocabulary, "t0" ... "tN", so that mlx_lm.load takes the directory
// as it is). Progress goes to progress when not nil.
func WriteMLX(dir string, s Spec, progress io.Writer) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	tensors := s.Tensors()
	if err := writeFile(filepath.Join(dir, "model.safetensors"), func(w *bufio.Writer) error {
		hdr, total := safetensorsHeader(tensors)
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		p := newProgress(progress, "model.safetensors", total)
		buf := make([]byte, 1<<20)
		for _, t := range tensors {
			if err := writeMLXTensor(w, s, t, buf); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			p.add(t.Bytes(), t.Name)
		}
		return nil
	}); err != nil {
		return err
	}
	files := []struct{ name, text string }{
		{"config.json", s.Config()},
		{"model.safetensors.index.json", s.Index()},
		{"tokenizer_config.json", `{"tokenizer_class": "PreTrainedTokenizerFast"}`},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), func(w *bufio.Writer) error {
			_, err := w.WriteString(f.text)
			return err
		}); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, "tokenizer.json"), func(w *bufio.Writer) error {
		return writeTokenizer(w, s.Vocab)
	})
}

// writeTokenizer writes a Hugging Face tokenizers WordLevel tokenizer whose
// tokens are "t0" ... "t<vocab-1>", split on whitespace, unknown words "t0"
// (the form conformance/oracle/models.py gives mlx_lm.load).
func writeTokenizer(w *bufio.Writer, vocab int) error {
	w.WriteString(`{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null, ` +
		`"pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null, ` +
		`"model": {"type": "WordLevel", "vocab": {`)
	for i := range vocab {
		if i > 0 {
			w.WriteString(", ")
		}
		w.WriteString(`"t` + strconv.Itoa(i) + `": ` + strconv.Itoa(i))
	}
	_, err := w.WriteString(`}, "unk_token": "t0"}}`)
	return err
}

// writeFile writes path through a temporary file renamed into place.
func writeFile(path string, fill func(w *bufio.Writer) error) error {
	if err := atomicfile.Write(path, fill); err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	return nil
}
