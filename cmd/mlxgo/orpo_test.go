package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// orpoModelDir is loraModelDir with the spm-llama2 test tokenizer, whose
// chat template renders a prompt that begins its conversations (the
// llama3 test template's does not) and whose ids on orpoData lie below
// the checkpoint's vocabulary.
func orpoModelDir(t *testing.T) string {
	dir := loraModelDir(t)
	tk := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "tokenizers", "spm-llama2")
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

// orpoData writes a small preference data directory of plain words.
func orpoData(t *testing.T, trainLines, validLines []string) string {
	dir := t.TempDir()
	for name, lines := range map[string][]string{"train": trainLines, "valid": validLines} {
		if lines == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name+".jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var orpoPairs = []string{
	`{"prompt": "hi", "chosen": "hello there", "rejected": "go"}`,
	`{"prompt": "name a color", "chosen": "green", "rejected": "a dog"}`,
	`{"prompt": [{"role": "user", "content": "count"}], "chosen": "one two three", "rejected": "three"}`,
	`{"chosen": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], "rejected": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]}`,
}

var orpoLineRE = regexp.MustCompile(`Iter (\d+): Train loss ([0-9.]+), Log-odds ratio (-?[0-9.]+), Chosen logp (-?[0-9.]+), Rejected logp (-?[0-9.]+), Learning Rate`)

// TestLoRAORPOCLI: `mlxgo lora --train --loss orpo` trains on preference
// pairs, both prefix-shared and with two forwards: each report names the
// ORPO loss, log-odds ratio and both log-probabilities, validations name
// the log-odds ratio, adapter_config.json records the ORPO options, and
// --test prints the test set's ORPO loss. The two readings of the pairs
// report the same losses (to the printed precision: prefix sharing equals
// two forwards, train.TestPrefixSharedEqualsTwoForwards).
func TestLoRAORPOCLI(t *testing.T) {
	model := orpoModelDir(t)
	data := orpoData(t, orpoPairs, orpoPairs[:2])
	outputs := map[bool]string{}
	for _, two := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "adapters")
		args := []string{"lora", "--model", model, "--train", "--loss", "orpo", "--orpo-lambda", "0.5", "--data", data, "--iters", "3",
			"--batch-size", "2", "--num-layers", "2", "--learning-rate", "1e-3", "--steps-per-report", "1", "--steps-per-eval", "2", "--adapter-path", out}
		if two {
			args = append(args, "--orpo-two-forwards")
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
		}
		for _, want := range []string{"Training with ORPO (λ 0.5", "Iter 1: Val loss", "Val log-odds ratio", "Iter 3: Train loss", "Saved final weights"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, stdout.String())
			}
		}
		lines := orpoLineRE.FindAllStringSubmatch(stdout.String(), -1)
		if len(lines) != 3 {
			t.Fatalf("%d report lines, want 3:\n%s", len(lines), stdout.String())
		}
		var reports []string
		for _, l := range lines {
			reports = append(reports, l[0])
		}
		outputs[two] = strings.Join(reports, "\n")
		raw, err := os.ReadFile(filepath.Join(out, "adapter_config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ac map[string]any
		if err := json.Unmarshal(raw, &ac); err != nil {
			t.Fatal(err)
		}
		if ac["loss"] != "orpo" || ac["orpo_lambda"] != 0.5 || ac["num_layers"] != 2.0 || (ac["orpo_two_forwards"] == true) != two {
			t.Errorf("adapter_config.json: %s", raw)
		}
		stdout.Reset()
		if code := run([]string{"lora", "--model", model, "--test", "--loss", "orpo", "--data", orpoData(t, nil, nil), "--adapter-path", out}, &stdout, &stderr); code != 1 ||
			!strings.Contains(stderr.String(), "test set not found") {
			t.Errorf("--test without a test set: exit %d, %s", code, stderr.String())
		}
		testDir := t.TempDir()
		os.WriteFile(filepath.Join(testDir, "test.jsonl"), []byte(strings.Join(orpoPairs, "\n")), 0o644)
		stdout.Reset()
		if code := run([]string{"lora", "--model", model, "--test", "--loss", "orpo", "--data", testDir, "--adapter-path", out}, &stdout, &stderr); code != 0 ||
			!regexp.MustCompile(`Test loss [0-9.]+, Test log-odds ratio -?[0-9.]+\.`).MatchString(stdout.String()) {
			t.Errorf("--test: exit %d: %s%s", code, stdout.String(), stderr.String())
		}
	}
	if !sameReports(outputs[false], outputs[true]) {
		t.Errorf("prefix-shared reports\n%s\ntwo-forward reports\n%s", outputs[false], outputs[true])
	}
}

// sameReports compares report lines up to the learning rate (rates and
// memory differ).
func sameReports(a, b string) bool {
	la, lb := orpoLineRE.FindAllStringSubmatch(a, -1), orpoLineRE.FindAllStringSubmatch(b, -1)
	if len(la) != len(lb) {
		return false
	}
	for i := range la {
		if la[i][0] != lb[i][0] {
			return false
		}
	}
	return true
}

// TestLoRAORPOCLIErrors: bad ORPO flags and data are named.
func TestLoRAORPOCLIErrors(t *testing.T) {
	model := orpoModelDir(t)
	good := orpoData(t, orpoPairs, nil)
	bad := orpoData(t, []string{orpoPairs[0], `{"prompt": "q", "chosen": "a"}`}, nil)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown loss", []string{"--loss", "dpo", "--data", good}, 1, `--loss "dpo"`},
		{"negative lambda", []string{"--orpo-lambda", "-1", "--data", good}, 1, "--orpo-lambda -1"},
		{"bad line", []string{"--data", bad}, 1, "train.jsonl:2: no field \"rejected\""},
		{"sft data", []string{"--data", filepath.Join(testenv.RepoRoot(t), "train", "testdata", "data")}, 1, "train.jsonl:1: no field \"chosen\""},
		{"accumulation", []string{"--data", good, "--grad-accumulation-steps", "2"}, 1, "--grad-accumulation-steps 2 with --loss orpo is not implemented"},
		{"checkpoint with sharing", []string{"--data", good, "--grad-checkpoint"}, 1, "--orpo-two-forwards"},
		{"too few pairs", []string{"--data", good, "--batch-size", "8"}, 1, "at least batch_size=8 preference pairs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"lora", "--model", model, "--train", "--loss", "orpo", "--num-layers", "1", "--iters", "1", "--batch-size", "2",
				"--adapter-path", filepath.Join(dir, c.name)}, c.args...)
			var stdout, stderr bytes.Buffer
			code := run(args, &stdout, &stderr)
			if code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), c.code, c.want)
			}
		})
	}
}
