package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/conformance"
)

// TestGenerateKVCaches runs `mlxgo generate --max-kv-size` (the rotating
// cache) and `--kv-bits --kv-group-size --quantized-kv-start` (the
// quantized cache) with the prompts and settings of the oracle's rotating
// and quantized greedy cases (conformance/oracle/kvcache.py) on the float32
// checkpoints, and requires mlx_lm's tokens exactly.
func TestGenerateKVCaches(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		flags []struct{ flag, param string }
	}{
		{"rotating", []struct{ flag, param string }{{"--max-kv-size", "max_kv_size"}}},
		{"quantized", []struct{ flag, param string }{{"--kv-bits", "kv_bits"}, {"--kv-group-size", "kv_group_size"}, {"--quantized-kv-start", "quantized_kv_start"}}},
	} {
		for _, ckpt := range []string{"q4g64-f32", "fp-f32"} {
			t.Run(tc.kind+"/"+ckpt, func(t *testing.T) {
				testGenerateCase(t, ckpt, "model__"+ckpt+"__"+tc.kind+"__greedy.json", tc.flags)
			})
		}
	}
}

func testGenerateCase(t *testing.T, ckpt, file string, flags []struct{ flag, param string }) {
	t.Helper()
	c, err := conformance.LoadCase(filepath.Join(fixtures, "models", ckpt, "cases", file))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.OpenArrays()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	in, err := a.Input("ids")
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output("tokens")
	if err != nil {
		t.Fatal(err)
	}
	var want []int32
	for _, v := range out.ToFloat64() {
		want = append(want, int32(v))
	}
	args := []string{"generate", "--model", filepath.Join(fixtures, "models", ckpt), "--prompt-ids", joinIDs(in.Int32s()), "--backend", "cpu"}
	for _, p := range append([]struct{ flag, param string }{{"--max-tokens", "max_tokens"}, {"--prefill-step", "prefill_step_size"}}, flags...) {
		v, err := c.Int(p.param)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, p.flag, strconv.Itoa(v))
	}
	rc, stdout, stderr := mlxgo(args...)
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	if got := generated(t, stdout); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got tokens %v\nwant (mlx_lm) %v", got, want)
	}
}

// TestGenerateKVCacheFlagsBad: sizes the rotating cache cannot have, bits,
// group sizes and starts the quantized cache does not offer, and the flags
// with a prompt cache file, are usage errors naming what is wrong.
func TestGenerateKVCacheFlagsBad(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative", []string{"--max-kv-size", "-1"}, "max KV size -1"},
		{"keep", []string{"--max-kv-size", "4"}, "max KV size 4"},
		{"prompt-cache", []string{"--max-kv-size", "16", "--prompt-cache-file", "x.safetensors"}, "apply to a new cache"},
		{"kv-bits", []string{"--kv-bits", "3"}, "KV bits 3: want one of [4 8]"},
		{"kv-group-size", []string{"--kv-bits", "4", "--kv-group-size", "128"}, "KV group size 128"},
		{"kv-start", []string{"--kv-bits", "4", "--quantized-kv-start", "-2"}, "quantized KV start -2"},
		{"rotating-quantized", []string{"--kv-bits", "4", "--max-kv-size", "16"}, "cannot be quantized"},
		{"head-dim", []string{"--kv-bits", "4", "--kv-group-size", "64"}, "does not divide the model's head_dim 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := mlxgo(append([]string{"generate", "--model", model, "--prompt-ids", "1,2"}, tc.args...)...)
			if rc != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", rc, stderr, tc.want)
			}
		})
	}
}
