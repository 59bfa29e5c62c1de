package lora

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// The files of an adapter directory, as mlx_lm.lora writes them and
// mlx_lm.tuner.utils.load_adapters reads them.
const (
	WeightsFile = "adapters.safetensors"
	ConfigFile  = "adapter_config.json"
)

// Config is what adapter_config.json says about the adapters; mlx_lm
// writes the whole training run's arguments there and reads back these.
type Config struct {
	FineTuneType string `json:"fine_tune_type"` // "lora" ("" means "lora") or "dora"; mlx_lm's "full" is not implemented
	NumLayers    int    `json:"num_layers"`
	LoRA         Params `json:"lora_parameters"`
}

// Save writes dir/adapters.safetensors (SaveWeights) and
// dir/adapter_config.json (SaveConfig). dir is made if missing.
func Save(b backend.Backend, dir string, ads []Adapter, cfg Config, extra map[string]any) error {
	if err := SaveConfig(dir, cfg, extra); err != nil {
		return err
	}
	return SaveWeights(b, filepath.Join(dir, WeightsFile), ads)
}

// SaveWeights writes every adapter's lora_a and lora_b (and DoRA's m),
// float32, named as mlx_lm names its trainable parameters, to path (a
// safetensors file, as mlx_lm's trainer saves adapters.safetensors and
// its numbered checkpoints).
func SaveWeights(b backend.Backend, path string, ads []Adapter) error {
	var names []string
	var ts []*tensor.Dense
	for _, a := range ads {
		for _, p := range a.Params() {
			d, err := b.ToHost(*p.Array)
			if err != nil {
				return fmt.Errorf("lora: %s.%s: %w", a.Path, p.Leaf, err)
			}
			if d.DType != tensor.F32 {
				d = d.Convert(tensor.F32)
			}
			names = append(names, a.Path+"."+p.Leaf)
			ts = append(ts, d)
		}
	}
	if err := tensor.WriteSafetensors(path, names, ts, map[string]string{"format": "mlx"}); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// SaveConfig writes dir/adapter_config.json: cfg's fields and extra,
// which must not repeat them, keys sorted and indented by 4 as mlx_lm's
// save_config. dir is made if missing.
func SaveConfig(dir string, cfg Config, extra map[string]any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	all := map[string]any{}
	for k, v := range extra {
		all[k] = v
	}
	if cfg.FineTuneType == "" {
		cfg.FineTuneType = "lora"
	}
	for k, v := range map[string]any{"fine_tune_type": cfg.FineTuneType, "num_layers": cfg.NumLayers, "lora_parameters": cfg.LoRA} {
		if _, dup := all[k]; dup {
			return fmt.Errorf("lora: extra config field %q repeats one of Config's", k)
		}
		all[k] = v
	}
	js, err := json.MarshalIndent(all, "", "    ") // maps marshal with sorted keys
	if err != nil {
		return fmt.Errorf("lora: %s: %w", ConfigFile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), js, 0o644); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// ReadConfig reads dir/adapter_config.json, checking the fields Load uses.
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, ConfigFile)
	raw, err := safefile.ReadFile(path, safefile.MaxJSONBytes)
	if err != nil {
		return Config{}, fmt.Errorf("lora: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return Config{}, fmt.Errorf("lora: %s: %w", path, err)
	}
	for _, k := range []string{"num_layers", "lora_parameters"} {
		if _, ok := fields[k]; !ok {
			return Config{}, fmt.Errorf("lora: %s: no field %q", path, k)
		}
	}
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("lora: %s: %w", path, err)
	}
	switch c.FineTuneType {
	case "", "lora":
		c.FineTuneType = "lora"
	case "dora":
	default:
		return Config{}, fmt.Errorf("lora: %s: fine_tune_type %q: only \"lora\" and \"dora\" are implemented", path, c.FineTuneType)
	}
	return c, nil
}

// Load puts the adapters of dir on m as mlx_lm's load_adapters does: the
// layers its config names (Apply's), then the weights (dropout, which
// only training uses, is read and ignored). Every tensor of the
// file must be a float32 lora_a or lora_b of one of those layers, of its
// shape, and every one of them must be there; an error names the file and
// the tensor.
func Load(b backend.Backend, m *minicpm5.Model, dir string) ([]Adapter, Config, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, Config{}, err
	}
	if _, err := cfg.LoRA.keys(); err != nil || cfg.LoRA.Rank <= 0 {
		return nil, Config{}, fmt.Errorf("lora: %s: lora_parameters %+v: want a positive rank and known keys", filepath.Join(dir, ConfigFile), cfg.LoRA)
	}
	path := filepath.Join(dir, WeightsFile)
	f, err := tensor.OpenSafetensors(path)
	if err != nil {
		return nil, Config{}, fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	if cfg.NumLayers > len(m.Layers) {
		return nil, Config{}, fmt.Errorf("lora: %s: num_layers %d, but the model has %d layers", filepath.Join(dir, ConfigFile), cfg.NumLayers, len(m.Layers))
	}
	dora := cfg.FineTuneType == "dora"
	want := map[string]tensor.Shape{}
	for _, a := range planned(m, cfg) {
		want[a.path+".lora_a"] = tensor.Shape{a.in, cfg.LoRA.Rank}
		want[a.path+".lora_b"] = tensor.Shape{cfg.LoRA.Rank, a.out}
		if dora {
			want[a.path+".m"] = tensor.Shape{a.out}
		}
	}
	got := map[string]*tensor.Dense{}
	for _, n := range f.Names() {
		shape, ok := want[n]
		if !ok {
			return nil, Config{}, fmt.Errorf("lora: %s: tensor %q is not an adapter of this model under %s", path, n, ConfigFile)
		}
		t, err := f.TensorCopy(n)
		if err != nil {
			return nil, Config{}, fmt.Errorf("lora: %w", err)
		}
		if t.DType != tensor.F32 || !t.Shape.Equal(shape) {
			return nil, Config{}, fmt.Errorf("lora: %s: tensor %q is %v %v, want F32 %v", path, n, t.DType, t.Shape, shape)
		}
		got[n] = t
	}
	var missing []string
	for n := range want {
		if got[n] == nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, Config{}, fmt.Errorf("lora: %s lacks %d adapter tensors, e.g. %q", path, len(missing), missing[0])
	}
	ads, err := apply(b, m, cfg.NumLayers, cfg.LoRA, dora, func(in, n int) []float32 { return make([]float32, n) })
	if err != nil {
		return nil, Config{}, fmt.Errorf("%w (%s)", err, filepath.Join(dir, ConfigFile))
	}
	for _, a := range ads {
		for _, p := range a.Params() {
			b.Release(*p.Array)
			*p.Array = b.FromHost(got[a.Path+"."+p.Leaf])
		}
	}
	return ads, cfg, nil
}

// plan is one layer Apply would adapt.
type plan struct {
	path    string
	in, out int
}

// planned lists the layers Apply(m, cfg) adapts, with their dimensions,
// without changing m (nil when cfg is invalid; apply reports why).
func planned(m *minicpm5.Model, cfg Config) []plan {
	keys, err := cfg.LoRA.keys()
	if err != nil || cfg.LoRA.Rank <= 0 {
		return nil
	}
	first := 0
	if cfg.NumLayers > 0 {
		first = len(m.Layers) - cfg.NumLayers
	}
	var out []plan
	for i := max(first, 0); i < len(m.Layers); i++ {
		for _, k := range keys {
			in, o, err := dims(*Projection(m.Layers[i], k))
			if err != nil {
				return nil
			}
			out = append(out, plan{fmt.Sprintf("model.layers.%d.%s", i, k), in, o})
		}
	}
	return out
}

// LoadWeights sets the adapters' arrays from a safetensors file of
// adapter weights (mlx_lm.lora's --resume-adapter-file, which it reads
// with model.load_weights(strict=False)): every tensor must name a
// parameter of ads with its shape; parameters the file lacks keep their
// values. It returns how many it set.
func LoadWeights(b backend.Backend, path string, ads []Adapter) (int, error) {
	f, err := tensor.OpenSafetensors(path)
	if err != nil {
		return 0, fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	slots := map[string]*backend.Array{}
	for _, a := range ads {
		for _, p := range a.Params() {
			slots[a.Path+"."+p.Leaf] = p.Array
		}
	}
	type set struct {
		slot *backend.Array
		t    *tensor.Dense
	}
	var sets []set
	for _, n := range f.Names() {
		slot, ok := slots[n]
		if !ok {
			return 0, fmt.Errorf("lora: %s: tensor %q is not a parameter of the adapters being trained", path, n)
		}
		t, err := f.TensorCopy(n)
		if err != nil {
			return 0, fmt.Errorf("lora: %w", err)
		}
		if !t.Shape.Equal((*slot).Shape()) {
			return 0, fmt.Errorf("lora: %s: tensor %q is %v, the adapter's is %v", path, n, t.Shape, (*slot).Shape())
		}
		if t.DType != (*slot).DType() {
			t = t.Convert((*slot).DType())
		}
		sets = append(sets, set{slot, t})
	}
	for _, s := range sets {
		b.Release(*s.slot)
		*s.slot = b.FromHost(s.t)
	}
	return len(sets), nil
}
