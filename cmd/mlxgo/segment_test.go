package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// TestLoRASegmentCLI: --segment-layers and --train-memory-budget train
// with a segmented backward and say which segments they chose; bad values
// and combinations are errors naming the flag.
func TestLoRASegmentCLI(t *testing.T) {
	model := loraModelDir(t)
	data := filepath.Join(testenv.RepoRoot(t), "train", "testdata", "data")
	dir := t.TempDir()
	drop := filepath.Join(dir, "drop.yaml")
	if err := os.WriteFile(drop, []byte("lora_parameters:\n  rank: 4\n  scale: 10\n  dropout: 0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"lora", "--model", model, "--train", "--data", data, "--num-layers", "2", "--iters", "2", "--batch-size", "2",
		"--steps-per-report", "1", "--max-seq-length", "64"}
	for i, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"segments of one", []string{"--segment-layers", "1"}, 0, "Segmented backward: 2 adapted layers in segments of 1, loss chunks of 16777 rows"},
		{"segments and chunk", []string{"--segment-layers", "2", "--loss-chunk", "16"}, 0, "in segments of 2, loss chunks of 16 rows"},
		{"budget for all", []string{"--train-memory-budget", "1G"}, 0, "in segments of 2"},
		{"negative segments", []string{"--segment-layers", "-1"}, 1, "--segment-layers -1: want a positive number"},
		{"too many segments", []string{"--segment-layers", "4"}, 1, "--segment-layers 4: the model has 3 layers"},
		{"both", []string{"--segment-layers", "1", "--train-memory-budget", "1G"}, 1, "--segment-layers and --train-memory-budget both given"},
		{"bad budget", []string{"--train-memory-budget", "12X"}, 1, `--train-memory-budget: "12X" is not a positive byte count`},
		{"small budget", []string{"--train-memory-budget", "1K"}, 1, "--train-memory-budget 1024 bytes is below the estimate for segments of one layer at batch 2 × 64 tokens"},
		{"negative chunk", []string{"--loss-chunk", "-3"}, 1, "--loss-chunk -3: want a positive number of rows"},
		{"with checkpointing", []string{"--segment-layers", "1", "--grad-checkpoint"}, 1, "--grad-checkpoint with a segmented backward: give one"},
		{"with dropout", []string{"-c", drop, "--segment-layers", "1"}, 1, "dropout 0.1 with a segmented backward is not implemented"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(append(append([]string{}, base...), "--adapter-path", filepath.Join(dir, strings.Repeat("a", i+1))), c.args...)
			code := run(args, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != c.code || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, output %q; want exit %d and %q", code, out, c.code, c.want)
			}
			if c.code == 0 && !strings.Contains(out, "Iter 2: Train loss") {
				t.Fatalf("no training report in %q", out)
			}
		})
	}
}
