package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// loraModelDir is the tiny optiq-f32 checkpoint with a test tokenizer
// whose ids on train/testdata/data lie below its vocabulary of 1000.
func loraModelDir(t *testing.T) string {
	root := testenv.RepoRoot(t)
	dir := t.TempDir()
	src := filepath.Join(root, "conformance", "testdata", "models", "optiq-f32")
	for _, f := range []string{"config.json", "model.safetensors", "model.safetensors.index.json"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	tk := filepath.Join(root, "conformance", "testdata", "tokenizers", "bytelevel-llama3")
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		raw, err := os.ReadFile(filepath.Join(tk, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var testLossRE = regexp.MustCompile(`Test loss ([0-9.]+), Test ppl`)

func testLoss(t *testing.T, out string) float64 {
	t.Helper()
	m := testLossRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no test loss line in:\n%s", out)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLoRATrainCLI: `mlxgo lora -c config.yaml` with a flag over the
// file trains, reports and saves as mlx_lm.lora does, and mlx_lm.lora
// --test loads the adapter directory mlxgo wrote and prints the test
// loss `mlxgo lora --test` prints for it.
func TestLoRATrainCLI(t *testing.T) {
	py := testenv.Python(t)
	model := loraModelDir(t)
	data := filepath.Join(testenv.RepoRoot(t), "train", "testdata", "data")
	out := filepath.Join(t.TempDir(), "adapters")
	cfg := filepath.Join(t.TempDir(), "lora.yaml")
	yaml := "model: " + model + "\ntrain: true\ndata: " + data + "\niters: 10\nbatch_size: 2\nnum_layers: 2\nlearning_rate: 1e-3\n" +
		"steps_per_report: 2\nsteps_per_eval: 2\nsave_every: 2\nreport_to: null\nlora_parameters:\n  rank: 4\n  scale: 10.0\n  dropout: 0.0\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"lora", "-c", cfg, "--iters", "3", "--adapter-path", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"Iter 1: Val loss", "Iter 2: Train loss", "Learning Rate 1.000e-03", "Tokens/sec", "Peak mem", "Iter 3: Train loss",
		"Iter 2: Saved adapter weights to " + filepath.Join(out, "adapters.safetensors") + " and " + filepath.Join(out, "0000002_adapters.safetensors")} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, "adapter_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ac map[string]any
	if err := json.Unmarshal(raw, &ac); err != nil {
		t.Fatal(err)
	}
	if ac["iters"] != 3.0 || ac["num_layers"] != 2.0 || ac["learning_rate"] != 1e-3 || ac["lora_parameters"].(map[string]any)["rank"] != 4.0 {
		t.Errorf("adapter_config.json: %s", raw)
	}
	stdout.Reset()
	if code := run([]string{"lora", "--model", model, "--test", "--data", data, "--adapter-path", out, "--batch-size", "2"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--test: exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	got := testLoss(t, stdout.String())
	cmd := exec.Command(py, "-m", "mlx_lm", "lora", "--model", model, "--test", "--data", data, "--adapter-path", out, "--batch-size", "2")
	cmd.Env = append(os.Environ(), "MLX_DEFAULT_DEVICE=cpu")
	ref, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mlx_lm.lora --test: %v\n%s", err, ref)
	}
	want := testLoss(t, string(ref))
	if d := got - want; d > 2e-3 || d < -2e-3 {
		t.Errorf("test loss %v, mlx_lm.lora with mlxgo's adapters %v", got, want)
	}
	t.Logf("test loss with mlxgo's adapters: mlxgo %v, mlx_lm.lora %v", got, want)
}

// TestLoRADropoutCheckpointCLI: LoRA dropout with --grad-checkpoint
// trains, and on the CPU backend gives the adapters of the same run
// without checkpointing byte for byte (the recomputed blocks draw their
// forward's masks).
func TestLoRADropoutCheckpointCLI(t *testing.T) {
	model := loraModelDir(t)
	data := filepath.Join(testenv.RepoRoot(t), "train", "testdata", "data")
	dir := t.TempDir()
	drop := filepath.Join(dir, "drop.yaml")
	if err := os.WriteFile(drop, []byte("lora_parameters:\n  rank: 4\n  scale: 10\n  dropout: 0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var files [][]byte
	for _, ck := range []bool{false, true} {
		out := filepath.Join(dir, fmt.Sprint(ck))
		args := []string{"lora", "-c", drop, "--backend", "cpu", "--model", model, "--train", "--data", data, "--num-layers", "2",
			"--iters", "2", "--batch-size", "2", "--learning-rate", "1e-2", "--adapter-path", out}
		if ck {
			args = append(args, "--grad-checkpoint")
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("checkpointing %v: exit %d: %s%s", ck, code, stdout.String(), stderr.String())
		}
		raw, err := os.ReadFile(filepath.Join(out, "adapters.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, raw)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("adapters trained with dropout differ with --grad-checkpoint from those without")
	}
}

// TestLoRACLIErrors: bad flags, config keys and data are named.
func TestLoRACLIErrors(t *testing.T) {
	model := loraModelDir(t)
	data := filepath.Join(testenv.RepoRoot(t), "train", "testdata", "data")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("iters: 3\nlearning_rat: 1e-5\n"), 0o644)
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no model", []string{"lora", "--train"}, 2, "--model (or model in the -c file) is required"},
		{"unknown config key", []string{"lora", "-c", bad}, 2, `line 2: field learning_rat not found`},
		{"missing config", []string{"lora", "-c", filepath.Join(dir, "none.yaml")}, 2, "none.yaml"},
		{"neither train nor test", []string{"lora", "--model", model, "--data", data}, 1, "at least one of --train or --test"},
		{"no training set", []string{"lora", "--model", model, "--train", "--data", dir}, 1, "training set not found or empty"},
		{"too many layers", []string{"lora", "--model", model, "--train", "--data", data, "--adapter-path", filepath.Join(dir, "a")}, 1, "requested to train 16 layers but the model only has 3"},
		{"bad optimizer", []string{"lora", "--model", model, "--train", "--data", data, "--num-layers", "1", "--optimizer", "lion", "--adapter-path", filepath.Join(dir, "b")}, 1, `unsupported optimizer "lion"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr)
			if code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), c.code, c.want)
			}
		})
	}
}
