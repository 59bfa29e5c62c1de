package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/tensor"
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

// TestGenerateSpeculativeKVCaches: mlxgo generate with a draft model or
// prompt lookup on a quantized or rotating cache prints the tokens plain
// decoding on that cache prints (float32 checkpoints, greedy).
func TestGenerateSpeculativeKVCaches(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	draft := filepath.Join(fixtures, "models", "q4g64-f32")
	base := []string{"generate", "--model", model, "--prompt-ids", "5,9,11,200,7,5,9,11,31,8,5,9", "--max-tokens", "12", "--prefill-step", "4", "--backend", "cpu"}
	for _, kv := range [][]string{
		{"--kv-cache", "quantized", "--kv-bits", "8", "--kv-group-size", "32", "--quantized-kv-start", "0"},
		{"--kv-bits", "4", "--kv-group-size", "32", "--quantized-kv-start", "3"},
		{"--max-kv-size", "40"},
	} {
		rc, out, errOut := mlxgo(append(slices.Clone(base), kv...)...)
		if rc != 0 {
			t.Fatalf("%v: exit %d, stderr:\n%s", kv, rc, errOut)
		}
		want := generated(t, out)
		for _, spec := range [][]string{{"--draft-model", draft, "--num-draft-tokens", "2"}, {"--prompt-lookup", "2"}} {
			rc, out, errOut := mlxgo(append(append(slices.Clone(base), kv...), spec...)...)
			if rc != 0 {
				t.Fatalf("%v %v: exit %d, stderr:\n%s", kv, spec, rc, errOut)
			}
			if got := generated(t, out); fmt.Sprint(got) != fmt.Sprint(want) || !strings.Contains(out, "drafted tokens accepted") {
				t.Errorf("%v %v: got %v, want %v (plain decoding)\n%s", kv, spec, got, want, out)
			}
		}
	}
}

// TestGenerateKVCacheFlagsBad: sizes the rotating cache cannot have, bits,
// group sizes and starts the quantized cache does not offer, and the flags
// are usage errors naming what is wrong.
func TestGenerateKVCacheFlagsBad(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative", []string{"--max-kv-size", "-1"}, "max KV size -1"},
		{"keep", []string{"--max-kv-size", "4"}, "max KV size 4"},
		{"kv-bits", []string{"--kv-bits", "3"}, "KV bits 3: want one of [4 8]"},
		{"kv-group-size", []string{"--kv-bits", "4", "--kv-group-size", "128"}, "KV group size 128"},
		{"kv-start", []string{"--kv-bits", "4", "--quantized-kv-start", "-2"}, "quantized KV start -2"},
		{"rotating-quantized", []string{"--kv-bits", "4", "--max-kv-size", "16"}, "cannot be quantized"},
		{"head-dim", []string{"--kv-bits", "4", "--kv-group-size", "64"}, "does not divide the model's head_dim 32"},
		{"kind", []string{"--kv-cache", "paged"}, `--kv-cache "paged": want full, quantized, rotating, turbo`},
		{"full-bits", []string{"--kv-cache", "full", "--kv-bits", "8"}, "--kv-cache full keeps every token"},
		{"rotating-size", []string{"--kv-cache", "rotating"}, "--kv-cache rotating needs --max-kv-size"},
		{"quantized-rotating", []string{"--kv-cache", "quantized", "--max-kv-size", "16"}, "cannot be quantized"},
		{"turbo-key-bits", []string{"--kv-cache", "turbo:k3v3"}, "turboquant key bits 3: want one of [2 4 5 8]"},
		{"turbo-value-bits", []string{"--kv-cache", "turbo:k8v6"}, "turboquant value bits 6: want one of [2 3 4 5 8]"},
		{"turbo-syntax", []string{"--kv-cache", "turbo:8,3"}, "want turbo or turbo:k<K>v<V>"},
		{"turbo-kv-bits", []string{"--kv-cache", "turbo", "--kv-bits", "8"}, "sets its own bits"},
		{"turbo-read", []string{"--kv-cache", "turbo", "--turbo-read", "lazy"}, `--turbo-read "lazy": want deferred or eager`},
		{"turbo-head-dim", []string{"--kv-cache", "turbo"}, "head_dim 32 is not supported"},
		{"rotating-speculative", []string{"--max-kv-size", "16", "--prompt-lookup", "2", "--max-tokens", "14"}, "--max-kv-size 16 with speculative decoding: the prompt's 2 tokens and --max-tokens 14 must fit in the window"},
		{"draft-head-dim", []string{"--kv-cache", "turbo", "--draft-model", model}, "head_dim 32 is not supported"},
		{"kv-dtype", []string{"--kv-dtype", "fp8"}, `--kv-dtype "fp8": want auto, float32, bfloat16 or float16`},
		{"kv-dtype-quantized", []string{"--kv-dtype", "bfloat16", "--kv-bits", "8"}, "--kv-dtype bfloat16 with --kv-bits 8: the dtype applies to the full KV cache only"},
		{"kv-dtype-rotating", []string{"--kv-dtype", "float16", "--max-kv-size", "16"}, "--kv-dtype float16 with --max-kv-size 16: the dtype applies to the full KV cache only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := mlxgo(append([]string{"generate", "--model", model, "--prompt-ids", "1,2"}, tc.args...)...)
			if rc != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", rc, stderr, tc.want)
			}
		})
	}
}

// TestKVCacheFlagsChatBatch: chat takes the KV cache flags (bad ones are
// usage errors naming them), and so does batch.
func TestKVCacheFlagsChatBatch(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"chat-bits", []string{"chat", "--model", model, "--kv-cache", "turbo:k8v7"}, "turboquant value bits 7"},
		{"chat-kind", []string{"chat", "--model", model, "--kv-cache", "turbo8"}, `--kv-cache "turbo8"`},
		{"batch-rotating", []string{"batch", "--model", model, "--prompts", "x.jsonl", "--max-kv-size", "3"}, "max KV size 3: want 0 (keep every token) or more than 4"},
		{"batch-bits", []string{"batch", "--model", model, "--prompts", "x.jsonl", "--kv-bits", "3"}, "KV bits 3: want one of [4 8]"},
		{"chat-kv-dtype", []string{"chat", "--model", model, "--kv-dtype", "half"}, `--kv-dtype "half": want auto, float32, bfloat16 or float16`},
		{"batch-kv-dtype", []string{"batch", "--model", model, "--prompts", "x.jsonl", "--kv-dtype", "bfloat16", "--kv-cache", "turbo"}, "--kv-dtype bfloat16 with --kv-cache turbo:k8v3: the dtype applies to the full KV cache only"},
		{"serve-kv-dtype", []string{"serve", "--model", model, "--kv-dtype", "int8"}, `--kv-dtype "int8"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := mlxgo(tc.args...)
			if rc != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", rc, stderr, tc.want)
			}
		})
	}
}

// TestKVQualityFlagsBad: mlxgo kvquality's bad flags are usage errors
// naming them (the measurement itself is slow and runs by hand; see README).
func TestKVQualityFlagsBad(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"model", []string{"--prompt-ids", "1,2"}, "--model DIR is required"},
		{"prompt", []string{"--model", model}, "exactly one of --prompt TEXT and --prompt-ids"},
		{"steps", []string{"--model", model, "--prompt-ids", "1,2", "--steps", "0"}, "--steps 0"},
		{"kind", []string{"--model", model, "--prompt-ids", "1,2", "--kinds", "kv8,turbo:k9v3"}, `--kinds item "turbo:k9v3"`},
		{"head-dim", []string{"--model", model, "--prompt-ids", "1,2", "--kinds", "turbo"}, "head_dim 32 is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := mlxgo(append([]string{"kvquality", "--backend", "cpu"}, tc.args...)...)
			if rc == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want an error containing %q", rc, stderr, tc.want)
			}
		})
	}
}

// TestGeneratePromptCacheKinds: generate --prompt-cache-file with KV cache
// flags accepts the flags naming the kind the file holds (the continuation
// then equals the one without them) and refuses any other kind with a
// usage error naming the file's kind and the flags'.
func TestGeneratePromptCacheKinds(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	dir := t.TempDir()
	files := map[string]string{}
	for name, kv := range map[string][]string{
		"full":      nil,
		"quantized": {"--kv-bits", "8", "--kv-group-size", "32", "--quantized-kv-start", "0"},
		"rotating":  {"--max-kv-size", "16"},
	} {
		files[name] = filepath.Join(dir, name+".safetensors")
		args := append([]string{"cache-prompt", "--model", model, "--prompt-ids", "5,17,250,3,999,42,7", "--prompt-cache-file", files[name], "--backend", "cpu"}, kv...)
		if rc, _, stderr := mlxgo(args...); rc != 0 {
			t.Fatalf("cache-prompt %s: exit %d, stderr:\n%s", name, rc, stderr)
		}
	}
	run := func(file string, kv ...string) (int, string, string) {
		return mlxgo(append([]string{"generate", "--prompt-cache-file", file, "--prompt-ids", "8,9", "--backend", "cpu", "--max-tokens", "5"}, kv...)...)
	}
	for _, tc := range []struct {
		file string
		kv   []string
	}{
		{"full", []string{"--kv-cache", "full"}},
		{"quantized", []string{"--kv-bits", "8"}},
		{"quantized", []string{"--kv-cache", "quantized", "--kv-bits", "8", "--kv-group-size", "32"}},
		{"rotating", []string{"--max-kv-size", "16"}},
	} {
		rc, plain, stderr := run(files[tc.file])
		if rc != 0 {
			t.Fatalf("%s: exit %d, stderr:\n%s", tc.file, rc, stderr)
		}
		rc, out, stderr := run(files[tc.file], tc.kv...)
		if rc != 0 {
			t.Fatalf("%s %v: exit %d, stderr:\n%s", tc.file, tc.kv, rc, stderr)
		}
		if got, want := generated(t, out), generated(t, plain); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s %v: got %v, want %v (without the flags)", tc.file, tc.kv, got, want)
		}
	}
	for _, tc := range []struct {
		file string
		kv   []string
		want string
	}{
		{"quantized", []string{"--kv-bits", "4"}, "holds 8-bit quantized caches in groups of 32 (QuantizedKVCache); --kv-bits 4 asks for another kind"},
		{"quantized", []string{"--kv-bits", "8", "--kv-group-size", "64"}, "holds 8-bit quantized caches in groups of 32"},
		{"quantized", []string{"--kv-cache", "full"}, "--kv-cache full asks for another kind"},
		{"rotating", []string{"--max-kv-size", "32"}, "holds rotating caches of 16 slots keeping 4 (RotatingKVCache); --max-kv-size 32 asks"},
		{"full", []string{"--max-kv-size", "16"}, "holds full caches (KVCache); --max-kv-size 16 asks for another kind"},
		{"full", []string{"--kv-bits", "8", "--kv-group-size", "32"}, "holds full caches (KVCache); --kv-bits 8 asks"},
		{"full", []string{"--kv-cache", "turbo"}, "holds full caches (KVCache); --kv-cache turbo:k8v3 asks"},
		{"full", []string{"--kv-dtype", "bfloat16"}, "--kv-dtype bfloat16 with --prompt-cache-file " + files["full"] + ": the file's caches are used as stored"},
	} {
		rc, _, stderr := run(files[tc.file], tc.kv...)
		if rc != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s %v: exit %d, stderr %q; want 2 and %q", tc.file, tc.kv, rc, stderr, tc.want)
		}
	}
}

// TestKVDTypeAuto: --kv-dtype resolves to the cache's nn.CacheOptions.KVDType:
// auto is bfloat16 for the full cache with --backend cpu --precision fast
// and stored as computed otherwise (other backends and precisions, the
// other kinds of cache); float32 is stored as computed; bfloat16 and
// float16 are themselves, or a usage error with another kind.
func TestKVDTypeAuto(t *testing.T) {
	for _, tc := range []struct {
		flag, backend, precision string
		kv                       []string
		want                     tensor.DType
		err                      string
	}{
		{"auto", "cpu", "fast", nil, tensor.BF16, ""},
		{"auto", "cpu", "reference", nil, 0, ""},
		{"auto", "cpu", "high", nil, 0, ""},
		{"auto", "mlx", "fast", nil, 0, ""},
		{"auto", "cpu", "fast", []string{"--kv-bits", "8"}, 0, ""},
		{"auto", "cpu", "fast", []string{"--max-kv-size", "64"}, 0, ""},
		{"auto", "cpu", "fast", []string{"--kv-cache", "full"}, tensor.BF16, ""},
		{"float32", "cpu", "fast", nil, 0, ""},
		{"bfloat16", "mlx", "reference", nil, tensor.BF16, ""},
		{"float16", "cpu", "fast", nil, tensor.F16, ""},
		{"float16", "cpu", "fast", []string{"--kv-cache", "turbo"}, 0, "--kv-dtype float16 with --kv-cache turbo:k8v3"},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s/%v", tc.flag, tc.backend, tc.precision, tc.kv), func(t *testing.T) {
			var f kvCacheFlags
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			f.registerKV(fs)
			f.registerKVDType(fs)
			if err := fs.Parse(append([]string{"--kv-dtype", tc.flag}, tc.kv...)); err != nil {
				t.Fatal(err)
			}
			f.setBackend(tc.backend, tc.precision)
			o, err := f.cacheKind()
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %v, want an error containing %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case o.KVDType != tc.want:
				t.Errorf("KVDType %v, want %v", o.KVDType, tc.want)
			}
		})
	}
}
