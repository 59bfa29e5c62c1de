package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/promptcache"
)

// TestCachePromptIDs: cache-prompt then generate --prompt-cache-file with
// token ids generates what generate gives for the whole sequence, with
// --model given or taken from the file's metadata.
func TestCachePromptIDs(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	file := filepath.Join(t.TempDir(), "c.safetensors")
	prefix, suffix := []int32{5, 17, 250, 3, 999, 42, 7}, []int32{8, 9}
	rc, stdout, stderr := mlxgo("cache-prompt", "--model", model, "--prompt-ids", joinIDs(prefix), "--prompt-cache-file", file, "--backend", "cpu", "--prefill-step", "3")
	if rc != 0 {
		t.Fatalf("cache-prompt: exit %d, stderr:\n%s", rc, stderr)
	}
	if want := fmt.Sprintf("saved the prompt cache (%d tokens) to %s\n", len(prefix), file); !strings.Contains(stdout, want) || !strings.Contains(stdout, "processed 7 tokens") {
		t.Errorf("cache-prompt output lacks %q and the processed line:\n%s", want, stdout)
	}
	pc, err := promptcache.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Tokens() != len(prefix) || pc.Metadata["model"] != model || pc.Metadata["tokenizer_config"] != `{"trust_remote_code": false}` {
		t.Errorf("file holds %d tokens, metadata %v; want %d, model %s and mlx_lm's tokenizer_config", pc.Tokens(), pc.Metadata, len(prefix), model)
	}
	rc, stdout, stderr = mlxgo("generate", "--model", model, "--prompt-ids", joinIDs(append(slices.Clone(prefix), suffix...)), "--backend", "cpu", "--max-tokens", "6")
	if rc != 0 {
		t.Fatalf("generate: exit %d, stderr:\n%s", rc, stderr)
	}
	want := generated(t, stdout)
	for _, args := range [][]string{
		{"--model", model},
		{}, // the model from the metadata
	} {
		t.Run(fmt.Sprintf("model-flag=%v", len(args) > 0), func(t *testing.T) {
			rc, stdout, stderr := mlxgo(append([]string{"generate", "--prompt-cache-file", file, "--prompt-ids", joinIDs(suffix), "--backend", "cpu", "--max-tokens", "6"}, args...)...)
			if rc != 0 {
				t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
			}
			if got := generated(t, stdout); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v (generate over the whole sequence)", got, want)
			}
			if !strings.Contains(stdout, fmt.Sprintf("prompt cache %s: %d tokens\n", file, len(prefix))) || !strings.Contains(stdout, fmt.Sprintf("prompt: %d tokens", len(suffix))) {
				t.Errorf("output lacks the prompt cache line or the %d-token prompt:\n%s", len(suffix), stdout)
			}
		})
	}
}

// TestCachePromptText: with a chat template, cache-prompt caches the user
// message left open, and generate --prompt-cache-file --prompt continues
// it: the answer equals the answer to one user message holding both texts
// (the fixture tokenizer gives one token per character, so the token
// sequences concatenate as the texts do).
func TestCachePromptText(t *testing.T) {
	dir := textFixture(t, chatML)
	o := newOracle(t, dir, []int32{1}, 5)
	file := filepath.Join(t.TempDir(), "c.safetensors")
	const cached, asked = "Read this: the sky is blue.", " What colour is it?"
	rc, stdout, stderr := mlxgo("cache-prompt", "--model", dir, "--prompt", cached, "--prompt-cache-file", file, "--backend", "cpu")
	if rc != 0 {
		t.Fatalf("cache-prompt: exit %d, stderr:\n%s", rc, stderr)
	}
	open := len("<|im_start|>user\n"+cached) - len("<|im_start|>") + 1 // one token per character, one for <|im_start|>
	if !strings.Contains(stdout, fmt.Sprintf("saved the prompt cache (%d tokens)", open)) {
		t.Errorf("want %d tokens cached (\"<|im_start|>user\\n\" and the text, the message left open):\n%s", open, stdout)
	}
	whole := o.ids("user", cached+asked)
	_, reply := o.answer(whole)
	rc, stdout, stderr = runGenerateText("", "--prompt-cache-file", file, "--prompt", asked, "--backend", "cpu", "--max-tokens", "5")
	if rc != 0 {
		t.Fatalf("generate: exit %d, stderr:\n%s", rc, stderr)
	}
	if want := fmt.Sprintf("\n%s\nprompt: %d tokens, ", reply, len(whole)-open); !strings.Contains(stdout, want) {
		t.Errorf("got\n%s\nwant it to contain %q", stdout, want)
	}
}

func TestCachePromptErrors(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	other := filepath.Join(fixtures, "models", "optiq-bf16")
	dir := t.TempDir()
	file := filepath.Join(dir, "c.safetensors")
	if rc, _, stderr := mlxgo("cache-prompt", "--model", model, "--prompt-ids", "1,2,3", "--prompt-cache-file", file, "--backend", "cpu"); rc != 0 {
		t.Fatalf("cache-prompt: exit %d: %s", rc, stderr)
	}
	// The same cache, its metadata naming the bf16 twin.
	pc, err := promptcache.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	pc.Metadata["model"] = other
	relabeled := filepath.Join(dir, "relabeled.safetensors")
	if err := pc.Write(relabeled); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		rc   int
		want []string
	}{
		{"cache/no-file", []string{"cache-prompt", "--model", model, "--prompt-ids", "1"}, 2, []string{"--prompt-cache-file is required"}},
		{"cache/no-prompt", []string{"cache-prompt", "--model", model, "--prompt-cache-file", file}, 2, []string{"exactly one of --prompt"}},
		{"cache/both-prompts", []string{"cache-prompt", "--model", model, "--prompt-cache-file", file, "--prompt", "a", "--prompt-ids", "1"}, 2, []string{"exactly one of --prompt"}},
		{"cache/out-of-vocab", []string{"cache-prompt", "--model", model, "--prompt-cache-file", file, "--prompt-ids", "1,1000"}, 2, []string{"1000", "vocab_size 1000"}},
		{"cache/bad-step", []string{"cache-prompt", "--model", model, "--prompt-cache-file", file, "--prompt-ids", "1", "--prefill-step", "0"}, 2, []string{"--prefill-step 0"}},
		{"generate/missing-file", []string{"generate", "--prompt-cache-file", filepath.Join(dir, "none.safetensors"), "--prompt-ids", "1"}, 2, []string{"--prompt-cache-file", "none.safetensors"}},
		{"generate/not-a-cache", []string{"generate", "--prompt-cache-file", filepath.Join(model, "model.safetensors"), "--prompt-ids", "1"}, 2, []string{"not a prompt cache file"}},
		{"generate/other-model", []string{"generate", "--model", other, "--prompt-cache-file", file, "--prompt-ids", "1"}, 2, []string{"is not the model the prompt cache", model}},
		{"generate/dtype", []string{"generate", "--prompt-cache-file", relabeled, "--prompt-ids", "1"}, 1, []string{"does not fit the model", "dtype F32, the model computes them in BF16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := mlxgo(append(tc.args, "--backend", "cpu")...)
			if rc != tc.rc {
				t.Errorf("got exit %d, want %d (stderr %q)", rc, tc.rc, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
		})
	}
}

func TestCachePromptHelp(t *testing.T) {
	rc, stdout, _ := mlxgo("cache-prompt", "--help")
	if rc != 0 {
		t.Fatalf("got exit %d, want 0", rc)
	}
	for _, w := range []string{"Examples:", "mlxgo cache-prompt --model", "mlxgo generate --prompt-cache-file", "-prompt-cache-file", "-prefill-step", "continue_final_message"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("help does not contain %q:\n%s", w, stdout)
		}
	}
	rc, stdout, _ = mlxgo("generate", "--help")
	if rc != 0 || !strings.Contains(stdout, "-prompt-cache-file") || !strings.Contains(stdout, "mlxgo generate --prompt-cache-file") {
		t.Errorf("generate --help (exit %d) does not document --prompt-cache-file with an example:\n%s", rc, stdout)
	}
}
