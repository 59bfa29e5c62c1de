package train

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// fuzzText is the byte-level Llama 3 tokenizer of the fixtures with its
// chat template, as the dataset tests use it.
func fuzzText(t testing.TB) *chat.Text {
	dir := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "tokenizers", "bytelevel-llama3")
	testenv.Need(t, filepath.Join(dir, "tokenizer.json"), "the oracle's tokenizer fixtures; run `make oracle`")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &chat.Text{Tok: tok, Template: true}
}

// FuzzLoadFile: any .jsonl file, with or without --mask-prompt, either
// fails with an error naming the file (and, for a bad line, the line), or
// gives examples of at least one token each, token ids in the vocabulary
// and a non-negative loss offset, which iterate_batches cuts into
// batches without error. Seeds: the data directories of the tests (text,
// chat, prompt-completion, with tools) and broken lines.
func FuzzLoadFile(f *testing.F) {
	text := fuzzText(f)
	for _, p := range []string{"testdata/data/train.jsonl", "testdata/chat/train.jsonl", "testdata/completions/train.jsonl",
		"../conformance/testdata/train/data/chat/train.jsonl", "../conformance/testdata/train/data/text/train.jsonl"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data, true)
		f.Add(data[:len(data)/2], false)
	}
	for _, s := range []string{
		"{\"text\": \"a\"}\n{\"text\": 7}\n",
		"{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\"}\n",
		"{\"messages\": []}\n",
		"{\"messages\": [{\"role\": \"user\"}]}\n",
		"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}\n",
		"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": 5}\n",
		"{\"text\": \"\"}\n",
		"[1, 2]\n",
		"\n",
		"{\"other\": 1}\n",
		"{\"text\": \"" + strings.Repeat("ab ", 2000) + "\"}\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	vocab := text.Tok.VocabSize()
	f.Fuzz(func(t *testing.T, data []byte, mask bool) {
		path := filepath.Join(t.TempDir(), "train.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		exs, err := LoadFile(path, text, DataOptions{MaskPrompt: mask})
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for i, ex := range exs {
			// The offset may pass the end: mlx_lm's as well, where the
			// prompt rendered with the generation prompt is longer than
			// the conversation (a template adding an empty think block).
			if len(ex.Tokens) == 0 || ex.Offset < 0 {
				t.Fatalf("example %d: %d tokens, offset %d", i, len(ex.Tokens), ex.Offset)
			}
			for _, id := range ex.Tokens {
				if id < 0 || int(id) >= vocab {
					t.Fatalf("example %d: token %d outside the vocabulary of %d", i, id, vocab)
				}
			}
		}
		if len(exs) == 0 {
			return
		}
		it, err := NewBatches(exs, 1, 16, false, NewNumpyRNG(0), io.Discard)
		if err != nil {
			t.Fatalf("NewBatches on %d examples: %v", len(exs), err)
		}
		for range exs {
			b, ok := it.Next()
			if !ok {
				break
			}
			if b.B != 1 || b.L < 1 || b.L > 16 || len(b.Tokens) != b.B*b.L {
				t.Fatalf("batch B %d, L %d, %d tokens", b.B, b.L, len(b.Tokens))
			}
		}
	})
}

// FuzzReadConfig: any -c YAML file either fails ReadConfig or Check with
// an error (ReadConfig's naming the file), or gives a configuration whose
// every option is in range, for which the optimizer's arguments are read.
// Seeds: the configuration of TestReadConfig, mlx_lm's example
// lora_config.yaml options, and out-of-range and malformed values.
func FuzzReadConfig(f *testing.F) {
	for _, s := range []string{
		"model: m\ntrain: true\nlearning_rate: 1e-5\nnum_layers: -1\nreport_to: null\nlr_schedule:\n  name: cosine_decay\n  warmup: 10\n  warmup_init: 1e-7\n  arguments: [1e-5, 1000, 1e-7]\noptimizer: adamw\noptimizer_config:\n  adamw:\n    betas: [0.8, 0.95]\n    weight_decay: 0.05\nlora_parameters:\n  keys: [\"self_attn.q_proj\", \"self_attn.v_proj\"]\n  rank: 16\n  scale: 10.0\n  dropout: 0.05\n",
		"model: \"mlx_model\"\ntrain: true\nfine_tune_type: lora\noptimizer: adam\ndata: \"/path/to/training/data\"\nseed: 0\nnum_layers: 16\nbatch_size: 4\niters: 1000\nval_batches: 25\nlearning_rate: 1e-5\nsteps_per_report: 10\nsteps_per_eval: 200\nresume_adapter_file: null\nadapter_path: \"adapters\"\nsave_every: 100\ntest: false\ntest_batches: 100\nmax_seq_length: 2048\ngrad_checkpoint: false\nlora_parameters:\n  keys: [\"self_attn.q_proj\", \"self_attn.v_proj\"]\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n",
		"learning_rate: .nan\n",
		"batch_size: 0\n",
		"iters: -3\ntrain: true\n",
		"val_batches: 0\n",
		"seed: -1\n",
		"lora_parameters:\n  rank: 1000000000000\n",
		"lora_parameters:\n  dropout: 1.0\n",
		"optimizer_config:\n  adam:\n    betas: [.nan, 0.9]\n",
		"optimizer_config:\n  sgd:\n    momentum: .inf\n",
		"lr_schedule:\n  warmup: 5\n",
		"lr_schedule:\n  name: cosine_decay\n  arguments: [1e-5, 1e300]\n",
		"lr_schedule:\n  name: exponential_decay\n  arguments: [1e-5, 0.9]\n",
		"a: &a [*a, *a]\n",
		"x: &x [1, 2]\ny: [*x, *x, *x, *x]\n",
		"- a\n",
		"iters: [3]\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c := Defaults()
		if err := ReadConfig(path, &c); err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := c.Check(); err != nil {
			if !strings.HasPrefix(err.Error(), "train: ") {
				t.Fatalf("error %q", err)
			}
			return
		}
		if c.BatchSize < 1 || c.MaxSeqLength < 1 || c.LoRAParameters.Rank < 1 || c.GradAccumulationSteps < 1 ||
			!(c.LoRAParameters.Dropout >= 0 && c.LoRAParameters.Dropout < 1) || c.LearningRate != c.LearningRate {
			t.Fatalf("Check accepted %+v", c)
		}
		if _, err := c.optimizerConfig(c.Optimizer); err != nil {
			t.Fatalf("Check accepted an optimizer_config that does not read: %v", err)
		}
	})
}
