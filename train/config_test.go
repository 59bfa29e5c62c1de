package train

import (
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
