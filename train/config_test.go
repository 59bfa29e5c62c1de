package train

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	body := `model: m
train: true
learning_rate: 1e-5
num_layers: -1
report_to: null
lr_schedule:
  name: cosine_decay
  warmup: 10
  warmup_init: 1e-7
  arguments: [1e-5, 1000, 1e-7]
optimizer: adamw
optimizer_config:
  adamw:
    betas: [0.8, 0.95]
    weight_decay: 0.05
lora_parameters:
  keys: ["self_attn.q_proj", "self_attn.v_proj"]
  rank: 16
  scale: 10.0
  dropout: 0.05
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	if err := ReadConfig(path, &c); err != nil {
		t.Fatal(err)
	}
	if c.Model != "m" || !c.Train || c.LearningRate != 1e-5 || c.NumLayers != -1 || c.BatchSize != 4 || c.Iters != 1000 ||
		c.LRSchedule == nil || c.LRSchedule.Name != "cosine_decay" || c.LRSchedule.Warmup != 10 || c.LRSchedule.WarmupInit != 1e-7 ||
		len(c.LRSchedule.Arguments) != 3 || c.LRSchedule.Arguments[1] != 1000 ||
		c.LoRAParameters.Rank != 16 || c.LoRAParameters.Dropout != 0.05 || len(c.LoRAParameters.Keys) != 2 {
		t.Fatalf("decoded %+v (schedule %+v)", c, c.LRSchedule)
	}
	oc, err := c.optimizerConfig("adamw")
	if err != nil {
		t.Fatal(err)
	}
	if oc.Betas != [2]float64{0.8, 0.95} || oc.WeightDecay != 0.05 || oc.Eps != 1e-8 {
		t.Errorf("optimizer config %+v", oc)
	}
	for _, bad := range []struct{ body, want string }{
		{"iters: 3\nlearning_rat: 1e-5\n", "line 2: field learning_rat not found"},
		{"iters: [3]\n", "line 1"},
		{"- a\n", "cannot unmarshal"},
		{"optimizer_config:\n  adam:\n    momentum: 0.9\n", ""},
	} {
		if err := os.WriteFile(path, []byte(bad.body), 0o644); err != nil {
			t.Fatal(err)
		}
		c := Defaults()
		err := ReadConfig(path, &c)
		if bad.want == "" {
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.optimizerConfig("adam"); err == nil || !strings.Contains(err.Error(), "optimizer_config.adam.momentum: not an argument of adam") {
				t.Errorf("optimizer_config momentum for adam: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: got %v, want an error naming %s and %q", bad.body, err, path, bad.want)
		}
	}
}

// TestConfigCheck: out-of-range options were accepted and failed late (after
// the model loaded), trained into NaN (a NaN learning rate or beta), or
// printed NaN losses (val_batches 0); Check names each (issue 19).
func TestConfigCheck(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		edit func(c *Config)
		want string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.BatchSize = 0 }, "train: batch_size 0: want at least 1"},
		{func(c *Config) { c.Train, c.Iters = true, -3 }, "train: iters -3"},
		{func(c *Config) { c.ValBatches = 0 }, "train: val_batches 0"},
		{func(c *Config) { c.TestBatches = -2 }, "train: test_batches -2"},
		{func(c *Config) { c.LearningRate = nan }, "train: learning_rate NaN: want a finite number"},
		{func(c *Config) { c.Seed = -1 }, "train: seed -1"},
		{func(c *Config) { c.MaxSeqLength = 0 }, "train: max_seq_length 0"},
		{func(c *Config) { c.SaveEvery = 0 }, "train: save_every 0"},
		{func(c *Config) { c.StepsPerEval = 0 }, "train: steps_per_eval 0"},
		{func(c *Config) { c.GradAccumulationSteps = 0 }, "train: grad_accumulation_steps 0"},
		{func(c *Config) { c.LoRAParameters.Rank = 0 }, "train: lora_parameters.rank 0"},
		{func(c *Config) { c.LoRAParameters.Scale = math.Inf(1) }, "train: lora_parameters.scale +Inf"},
		{func(c *Config) { c.LoRAParameters.Dropout = 1 }, "train: lora_parameters.dropout 1"},
		{func(c *Config) { c.FineTuneType = "full" }, `train: fine_tune_type "full"`},
		{func(c *Config) { c.Optimizer = "lion" }, `train: optimizer "lion"`},
		{func(c *Config) { c.LRSchedule = &Schedule{Warmup: 5} }, "train: lr_schedule has no name"},
		{func(c *Config) { c.LRSchedule = &Schedule{Name: "cosine_decay", Arguments: []float64{1e-5, 1e300}} }, "magnitude at most 2^31"},
		{func(c *Config) { c.LRSchedule = &Schedule{Name: "linear_schedule", Arguments: []float64{nan, 0, 10}} }, "each must be a finite number"},
		{func(c *Config) {
			c.OptimizerConfig = map[string]map[string]any{"adam": {"betas": []any{nan, 0.9}}}
		}, "train: optimizer_config.adam: json: unsupported value: NaN"},
		{func(c *Config) {
			c.Optimizer, c.OptimizerConfig = "sgd", map[string]map[string]any{"sgd": {"momentum": math.Inf(1)}}
		}, "train: optimizer_config.sgd"},
		{func(c *Config) { c.OptimizerConfig = map[string]map[string]any{"adagrad": {}} }, "train: optimizer_config.adagrad: not an optimizer"},
	} {
		cfg := Defaults()
		c.edit(&cfg)
		err := cfg.Check()
		if c.want == "" {
			if err != nil {
				t.Errorf("the defaults: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}

// TestNotRegularFiles: a -c file or a data .jsonl that is a symbolic link
// to /dev/zero was read without end (the config) or up to the line limit
// (the data), and a directory gave a message naming no file; each is
// refused by name now (issue 19).
func TestNotRegularFiles(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	for _, p := range []string{zero, dir} {
		if err := ReadConfig(p, &c); err == nil || !strings.Contains(err.Error(), p+": not a regular file") {
			t.Errorf("ReadConfig(%s): got %v", p, err)
		}
		if _, err := LoadFile(p, nil, DataOptions{}); err == nil || !strings.Contains(err.Error(), p+": not a regular file") {
			t.Errorf("LoadFile(%s): got %v", p, err)
		}
	}
	data := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(data, "valid.jsonl")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := LoadDir(data, nil, DataOptions{}); err == nil || !strings.Contains(err.Error(), "valid.jsonl: not a regular file") {
		t.Errorf("LoadDir with valid.jsonl -> /dev/zero: got %v", err)
	}
}
