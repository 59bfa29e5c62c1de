package lora

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// FuseResult says what Fuse wrote.
type FuseResult struct {
	Fused   int // adapted layers folded into their weights
	Tensors int // tensors written
	// Warnings are what the checkpoint loader noticed in src (the
	// caller prints them).
	Warnings []string
}

// Fuse is mlx_lm.fuse: it loads the model of src with the adapters of
// adapterDir, folds each adapter into its layer (nn.LoRALinear.Fuse /
// nn.DoRALinear.Fuse: quantized again with the layer's group size and
// bits), and writes a model directory to out: model.safetensors (every
// other tensor of src as it is), config.json, and src's other files
// (tokenizer, chat template) copied. With dequantize every quantized
// tensor of the model is written dequantized (mlx_lm's dequantize_model)
// and the config loses its quantization blocks. out must not exist yet.
func Fuse(b backend.Backend, src, adapterDir, out string, dequantize bool) (res FuseResult, err error) {
	if _, err := os.Stat(out); err == nil {
		return res, fmt.Errorf("lora: fuse: %s already exists", out)
	}
	set, err := tensor.OpenSafetensorsDir(src)
	if err != nil {
		return res, err
	}
	defer set.Close()
	replaced := map[string]*tensor.Dense{} // tensor name → fused value; nil: dropped
	err = b.Do(func() (err error) {
		defer backend.Recover(&err)
		m, err := minicpm5.Load(b, src)
		if err != nil {
			return err
		}
		defer m.Close()
		res.Warnings = m.Warnings()
		s := b.Scope()
		defer s.Close()
		ads, _, err := Load(b, m, adapterDir)
		if err != nil {
			return err
		}
		for _, a := range ads {
			var fused nn.Linear
			switch l := a.Layer.(type) {
			case *nn.LoRALinear:
				fused, err = l.Fuse(dequantize)
			case *nn.DoRALinear:
				fused, err = l.Fuse(dequantize)
			}
			if err != nil {
				return err
			}
			put := func(leaf string, x backend.Array) error {
				d, err := b.ToHost(x)
				replaced[a.Path+"."+leaf] = d
				return err
			}
			switch f := fused.(type) {
			case *nn.QuantizedLinear:
				err = firstErr(put("weight", f.Weight.W), put("scales", f.Weight.Scales), put("biases", f.Weight.Biases))
			case *nn.Dense:
				err = put("weight", f.Weight)
				replaced[a.Path+".scales"], replaced[a.Path+".biases"] = nil, nil
			}
			if err != nil {
				return err
			}
			res.Fused++
		}
		if dequantize {
			return dequantizeAll(b, src, set, replaced)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	var names []string
	var ts []*tensor.Dense
	for _, n := range set.Names() {
		d, ok := replaced[n]
		switch {
		case ok && d == nil:
			continue
		case !ok:
			if d, err = set.Tensor(n); err != nil {
				return res, err
			}
		}
		names = append(names, n)
		ts = append(ts, d)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return res, fmt.Errorf("lora: fuse: %w", err)
	}
	if err := tensor.WriteSafetensors(filepath.Join(out, "model.safetensors"), names, ts, map[string]string{"format": "mlx"}); err != nil {
		return res, fmt.Errorf("lora: fuse: %w", err)
	}
	res.Tensors = len(names)
	if err := writeConfig(src, out, dequantize); err != nil {
		return res, err
	}
	return res, copyOthers(src, out)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// dequantizeAll adds to replaced the dequantized weight of every quantized
// layer of src not already there (and drops its scales and biases), with
// the params the checkpoint loader finds for it (its config rule, or
// inferred from the shapes as mlx_lm does).
func dequantizeAll(b backend.Backend, src string, set *tensor.SafetensorsSet, replaced map[string]*tensor.Dense) error {
	ck, err := checkpoint.Open(src)
	if err != nil {
		return err
	}
	defer ck.Close()
	params := map[string]checkpoint.QuantParams{}
	if ck.Embed.Quantized {
		params[ck.Embed.Path] = ck.Embed.Params
	}
	linears := []*checkpoint.Linear{ck.Head}
	for _, l := range ck.Layers {
		linears = append(linears, l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down)
	}
	for _, l := range linears {
		if l != nil && l.Quantized {
			params[l.Path] = l.Params
		}
	}
	for path, p := range params {
		if _, done := replaced[path+".weight"]; done {
			continue
		}
		var ts [3]*tensor.Dense
		for i, leaf := range []string{".weight", ".scales", ".biases"} {
			if ts[i], err = set.Tensor(path + leaf); err != nil {
				return err
			}
		}
		q := backend.QuantizedArray{W: b.FromHost(ts[0]), Scales: b.FromHost(ts[1]), Biases: b.FromHost(ts[2]), GroupSize: p.GroupSize, Bits: p.Bits}
		d, err := b.ToHost(b.Dequantize(q))
		if err != nil {
			return err
		}
		replaced[path+".weight"], replaced[path+".scales"], replaced[path+".biases"] = d, nil, nil
	}
	return nil
}

// writeConfig copies src's config.json to out, without its quantization
// blocks when dequantize is set (as mlx_lm.fuse --dequantize).
func writeConfig(src, out string, dequantize bool) error {
	raw, err := safefile.ReadFile(filepath.Join(src, "config.json"), safefile.MaxJSONBytes)
	if err != nil {
		return fmt.Errorf("lora: fuse: %w", err)
	}
	if dequantize {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("lora: fuse: %s: %w", filepath.Join(src, "config.json"), err)
		}
		delete(m, "quantization")
		delete(m, "quantization_config")
		if raw, err = json.MarshalIndent(m, "", "    "); err != nil {
			return fmt.Errorf("lora: fuse: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(out, "config.json"), raw, 0o644)
}

// copyOthers copies the regular files of src that are neither weights nor
// config.json (tokenizer files, chat templates, generation_config.json).
func copyOthers(src, out string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("lora: fuse: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if n == "config.json" || strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".safetensors.index.json") {
			continue
		}
		// A symbolic link to a regular file is copied (the Hugging Face
		// cache's snapshots are links to blobs); directories, devices and
		// links to them are not.
		if _, err := safefile.Check(filepath.Join(src, n)); err != nil {
			continue
		}
		if err := copyFile(filepath.Join(src, n), filepath.Join(out, n)); err != nil {
			return fmt.Errorf("lora: fuse: %w", err)
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}
