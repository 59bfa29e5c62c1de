package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

// hostileAdapter writes a valid rank-2 LoRA adapter directory for the
// model good (its last layer).
func hostileAdapter(t *testing.T, good, root string) string {
	t.Helper()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := minicpm5.Load(b, good)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := lora.Params{Rank: 2, Scale: 5}
	ads, err := lora.Apply(b, m, 1, p, generate.NewRNG(1))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "adapter")
	if err := lora.Save(b, dir, ads, lora.Config{NumLayers: 1, LoRA: p}, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hostileData writes a valid training data directory (text lines).
func hostileData(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(root, "data")
	lines := strings.Repeat(`{"text": "the cat sat on the mat"}`+"\n", 4)
	placeFiles(t, dir, map[string]string{"train.jsonl": lines, "valid.jsonl": lines, "test.jsonl": lines})
	return dir
}

// hostileCases are the flag, file and template cases on the valid model
// {M}.
func hostileCases(t *testing.T, good, root string) []hostileCase {
	t.Helper()
	hdr := func(h string) string { return string(binary.LittleEndian.AppendUint64(nil, uint64(len(h)))) + h }
	// A prompt cache of {M} (full kind) and one of another kind
	// (quantized), made in-process.
	cacheFull := filepath.Join(root, "cache-full.safetensors")
	cacheQuant := filepath.Join(root, "cache-q8.safetensors")
	for _, c := range []struct {
		path  string
		flags []string
	}{{cacheFull, nil}, {cacheQuant, []string{"--kv-bits", "8", "--kv-group-size", "32", "--quantized-kv-start", "0"}}} {
		args := append([]string{"cache-prompt", "--model", good, "--prompt-ids", "1,2,3,4,5", "--prompt-cache-file", c.path, "--backend", "cpu"}, c.flags...)
		if rc, _, stderr := mlxgo(args...); rc != 0 {
			t.Fatalf("making %s: %s", c.path, stderr)
		}
	}
	full, err := os.ReadFile(cacheFull)
	if err != nil {
		t.Fatal(err)
	}
	// A cache of another model: head_dim 64 (a synthetic checkpoint).
	other := filepath.Join(root, "other-model")
	if rc, _, stderr := mlxgo("synth", "--preset", "tiny", "--head-dim", "64", "--heads", "4", "--out", other); rc != 0 {
		t.Fatalf("synth: %s", stderr)
	}
	cacheOther := filepath.Join(root, "cache-other.safetensors")
	if rc, _, stderr := mlxgo("cache-prompt", "--model", other, "--prompt-ids", "1,2,3", "--prompt-cache-file", cacheOther, "--backend", "cpu"); rc != 0 {
		t.Fatalf("making %s: %s", cacheOther, stderr)
	}
	cacheTurbo := filepath.Join(root, "cache-turbo.safetensors")
	if rc, _, stderr := mlxgo("cache-prompt", "--model", other, "--prompt-ids", "1,2,3", "--prompt-cache-file", cacheTurbo, "--kv-cache", "turbo", "--backend", "cpu"); rc != 0 {
		t.Fatalf("making %s: %s", cacheTurbo, stderr)
	}
	gguf := filepath.Join(root, "tiny.gguf")
	if rc, _, stderr := mlxgo("synth", "--preset", "tiny", "--format", "gguf", "--out", gguf); rc != 0 {
		t.Fatalf("synth gguf: %s", stderr)
	}
	ggufData, err := os.ReadFile(gguf)
	if err != nil {
		t.Fatal(err)
	}
	// The GGUF with one tensor's type, or a dimension, changed in the
	// header. (mlxgo synth's GGUF has a llama tokenizer, which convert
	// refuses before it reads tensors: the tensor-level checks of convert,
	// a missing tensor or one of the wrong shape, are held by
	// convert.TestConvertChecksOutput and FuzzConvert on a convertible GGUF.)
	patch := func(tensor string, skip int, v []byte) string {
		i := bytes.Index(ggufData, []byte(tensor))
		if i < 0 {
			t.Fatalf("%s not in the GGUF", tensor)
		}
		out := bytes.Clone(ggufData)
		copy(out[i+len(tensor)+skip:], v)
		return string(out)
	}
	norm := "blk.0.attn_norm.weight"
	ggufType := patch(norm, 4+8, binary.LittleEndian.AppendUint32(nil, 99))     // n_dims (4 bytes), dims[0], then the ggml type
	ggufHugeDim := patch(norm, 4, binary.LittleEndian.AppendUint64(nil, 1<<62)) // a dimension of 2^62
	gen := func(name, want string, flags ...string) hostileCase {
		return hostileCase{name: "generate/" + name, args: append([]string{"generate", "--model", "{M}", "--prompt", "hi", "--max-tokens", "2"}, flags...), want: want}
	}
	cases := []hostileCase{
		// generate: sampling and length flags.
		gen("temp-nan", `--temp NaN`, "--temp", "NaN"),
		gen("temp-negative", `--temp -1`, "--temp", "-1"),
		gen("temp-inf", `temp is \+Inf, want a finite value`, "--temp", "Inf"),
		gen("top-p-nan", `--top-p NaN`, "--top-p", "NaN"),
		gen("top-p-2", `--top-p 2`, "--top-p", "2"),
		gen("top-p-negative", `--top-p -0.5`, "--top-p", "-0.5"),
		gen("top-k-negative", `--top-k -1`, "--top-k", "-1"),
		gen("min-p-nan", `--min-p NaN`, "--min-p", "NaN"),
		gen("min-p-2", `--min-p 2`, "--min-p", "2"),
		gen("min-tokens-to-keep-0", `--min-tokens-to-keep 0`, "--min-tokens-to-keep", "0"),
		gen("max-tokens-negative", `--max-tokens -1`, "--max-tokens", "-1"),
		// (--max-tokens 1000000000000 is not in the sweep: it is a valid
		// request, accepted by mlx_lm too, and runs until stopped.)
		gen("max-tokens-word", `invalid value "ten" for flag -max-tokens`, "--max-tokens", "ten"),
		gen("repetition-penalty-nan", `--repetition-penalty NaN`, "--repetition-penalty", "NaN"),
		gen("repetition-penalty-negative", `--repetition-penalty -1`, "--repetition-penalty", "-1"),
		// 0 turns the penalty off, as in mlx_lm (make_logits_processors).
		{name: "generate/repetition-penalty-zero", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--max-tokens", "2", "--repetition-penalty", "0"}, ok: true},
		gen("repetition-context-negative", `--repetition-context-size -1`, "--repetition-context-size", "-1"),
		gen("prefill-step-zero", `--prefill-step 0`, "--prefill-step", "0"),
		gen("prefill-step-negative", `--prefill-step -4`, "--prefill-step", "-4"),
		gen("seed-negative", `seed.*(invalid|parse)`, "--seed", "-1"),
		gen("kv-bits-7", `--kv-bits.*KV bits 7: want one of \[4 8\]`, "--kv-bits", "7"),
		gen("kv-group-size-48", `--kv-group-size.*KV group size 48: want one of \[32 64\]`, "--kv-bits", "8", "--kv-group-size", "48"),
		gen("max-kv-size-negative", `--max-kv-size.*max KV size -1: want 0`, "--max-kv-size", "-1"),
		gen("max-kv-size-3", `--max-kv-size.*max KV size 3: want 0`, "--max-kv-size", "3"),
		gen("quantized-kv-start-negative", `--quantized-kv-start.*quantized KV start -1`, "--kv-bits", "8", "--quantized-kv-start", "-1"),
		gen("kv-cache-bogus", `--kv-cache "?bogus`, "--kv-cache", "bogus"),
		gen("kv-cache-turbo-k9", `turbo.*(bits|k9)`, "--kv-cache", "turbo:k9v9"),
		gen("kv-cache-turbo-headdim", `head_dim 32`, "--kv-cache", "turbo"),
		gen("turbo-read-bogus", `--turbo-read`, "--turbo-read", "sideways"),
		gen("precision-bogus", `--precision`, "--precision", "ultra"),
		gen("backend-bogus", `--backend "?tpu`, "--backend", "tpu"),
		gen("num-draft-negative", `--num-draft-tokens -1`, "--num-draft-tokens", "-1"),
		gen("draft-model-missing", `--draft-model.*nonexistent`, "--draft-model", "{D}/nonexistent"),
		gen("prompt-lookup-negative", `--prompt-lookup -1`, "--prompt-lookup", "-1"),
		gen("stray-argument", `(argument|unexpected).*stray`, "stray"),
		gen("unknown-flag", `-bogus`, "--bogus", "1"),
		{name: "generate/prompt-ids-word", args: []string{"generate", "--model", "{M}", "--prompt-ids", "1,x", "--max-tokens", "2"}, want: `--prompt-ids.*"?x`},
		{name: "generate/prompt-ids-out-of-vocab", args: []string{"generate", "--model", "{M}", "--prompt-ids", "99999999", "--max-tokens", "2"}, want: `99999999`},
		{name: "generate/prompt-ids-negative", args: []string{"generate", "--model", "{M}", "--prompt-ids", "-1", "--max-tokens", "2"}, want: `-1`},
		{name: "generate/prompt-ids-empty", args: []string{"generate", "--model", "{M}", "--prompt-ids", "", "--max-tokens", "2"}, want: `(prompt|empty)`},
		{name: "generate/prompt-ids-and-prompt", args: []string{"generate", "--model", "{M}", "--prompt-ids", "1", "--prompt", "hi"}, want: `--prompt`},
		{name: "generate/model-missing", args: []string{"generate", "--model", "{D}/nope", "--prompt", "hi"}, want: `nope`},
		{name: "generate/model-is-file", args: []string{"generate", "--model", "{D}/f", "--prompt", "hi"}, files: map[string]string{"f": "x"}, want: `/f`},
		{name: "generate/model-repo-id-offline", args: []string{"generate", "--model", "org/name", "--prompt", "hi", "--offline"}, want: `org/name`},
		{name: "generate/model-repo-id-bad", args: []string{"generate", "--model", "../../etc", "--prompt", "hi"}, want: `\.\./\.\./etc`},
		{name: "generate/messages-last-ok", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--max-tokens", "2"}, ok: true},
		// Prompt cache files.
		{name: "generate/cache-zero", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", "{D}/c"}, files: map[string]string{"c": "@zero"}, want: `/c: not a regular file`},
		{name: "generate/cache-dir", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", "{D}/c"}, files: map[string]string{"c": "@dir"}, want: `/c: not a regular file`},
		{name: "generate/cache-missing", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", "{D}/c"}, want: `/c.*no such file`},
		{name: "generate/cache-truncated", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", "{D}/c"}, files: map[string]string{"c": string(full[:len(full)/2])}, want: `/c`},
		{name: "generate/cache-not-a-cache", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", "{D}/c"}, files: map[string]string{"c": "@copy:" + filepath.Join(good, "model.safetensors")}, want: `/c.*(metadata|not a prompt cache)`},
		{name: "generate/cache-header-huge", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", "{D}/c"}, files: map[string]string{"c": hdr(`{"__metadata__": {"1.0": "KVCache"}, "0.0": {"dtype": "F32", "shape": [1, 2, 4294967296, 32], "data_offsets": [0, 0]}}`)}, want: `/c`},
		{name: "generate/cache-other-model", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", cacheOther}, want: `is not the model the prompt cache .*cache-other.safetensors was made with`},
		{name: "generate/cache-turbo-other-model", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", cacheTurbo}, want: `is not the model the prompt cache .*cache-turbo.safetensors was made with`},
		{name: "generate/cache-quantized-with-full", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", cacheQuant, "--kv-cache", "turbo"}, want: `(cache|kind|turbo|head_dim)`},
		{name: "generate/cache-quantized-ok", args: []string{"generate", "--model", "{M}", "--prompt-ids", "6", "--max-tokens", "2", "--prompt-cache-file", cacheQuant}, ok: true},
		// Adapters.
		{name: "generate/adapter-missing", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/nope"}, want: `nope.*adapter_config.json|adapter_config.json.*nope`},
		{name: "generate/adapter-config-zero", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": "@zero", "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `adapter_config.json: not a regular file`},
		{name: "generate/adapter-weights-zero", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": `{"num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5}}`, "a/adapters.safetensors": "@zero"}, want: `adapters.safetensors: not a regular file`},
		{name: "generate/adapter-other-rank", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": `{"num_layers": 1, "lora_parameters": {"rank": 4, "scale": 5}}`, "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `adapters.safetensors.*want F32 \[128 4\]`},
		{name: "generate/adapter-too-many-layers", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": `{"num_layers": 9, "lora_parameters": {"rank": 2, "scale": 5}}`, "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `num_layers 9`},
		{name: "generate/adapter-other-model", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": `{"num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5}}`, "a/adapters.safetensors": hdr(`{"model.layers.2.mlp.up_proj.lora_a": {"dtype": "F32", "shape": [64, 2], "data_offsets": [0, 512]}}`) + strings.Repeat("\x00", 512)}, want: `up_proj.lora_a.*\[64 2\]`},
		{name: "generate/adapter-full", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": `{"fine_tune_type": "full", "num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5}}`, "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `fine_tune_type "full"`},
		{name: "generate/adapter-rank-huge", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": `{"num_layers": 1, "lora_parameters": {"rank": 1000000000, "scale": 5}}`, "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `adapters.safetensors`},
		{name: "generate/adapter-ok", args: []string{"generate", "--model", "{M}", "--prompt", "hi", "--max-tokens", "2", "--adapter-path", "{ADAPTER}"}, ok: true},
		// chat.
		// An unknown /command is refused (not sent to the model); the
		// session goes on and ends normally.
		{name: "chat/unknown-command", args: []string{"chat", "--model", "{M}", "--max-tokens", "2"}, stdin: "/bogus\n", ok: true, want: `unknown command /bogus`},
		{name: "chat/temp-nan", args: []string{"chat", "--model", "{M}", "--temp", "NaN"}, stdin: "hi\n", want: `--temp NaN`},
		{name: "chat/max-tokens-negative", args: []string{"chat", "--model", "{M}", "--max-tokens", "-1"}, stdin: "hi\n", want: `--max-tokens -1`},
		{name: "chat/ok", args: []string{"chat", "--model", "{M}", "--max-tokens", "2"}, stdin: "hi\n", ok: true},
		{name: "chat/binary-stdin", args: []string{"chat", "--model", "{M}", "--max-tokens", "2"}, stdin: "\x00\xff\xfe\n", ok: true},
		// batch.
		{name: "batch/batch-cache-bad", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--batch-cache", "paged"}, want: `--batch-cache "paged": want auto, shared or per-row`},
		{name: "batch/batch-cache-shared-quantized", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--batch-cache", "shared", "--kv-bits", "8"}, want: `--batch-cache shared with --kv-bits 8`},
		{name: "serve/batch-cache-per-row-rotating", args: []string{"serve", "--model", "{M}", "--batch-cache", "per-row", "--max-kv-size", "64"}, want: `--batch-cache per-row with --max-kv-size 64`},
		{name: "batch/prompts-zero", args: []string{"batch", "--model", "{M}", "--prompts", "{D}/p"}, files: map[string]string{"p": "@zero"}, want: `/p: not a regular file`},
		{name: "batch/prompts-dir", args: []string{"batch", "--model", "{M}", "--prompts", "{D}/p"}, files: map[string]string{"p": "@dir"}, want: `/p: not a regular file`},
		{name: "batch/prompts-missing", args: []string{"batch", "--model", "{M}", "--prompts", "{D}/p"}, want: `/p.*no such file`},
		{name: "batch/line-not-json", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: "{\"prompt\": \n", want: `line 1`},
		{name: "batch/line-unknown-field", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"prompt": "hi", "temprature": 1}` + "\n", want: `line 1.*temprature`},
		{name: "batch/line-two-prompts", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"prompt": "hi", "prompt_ids": [1]}` + "\n", want: `line 1`},
		{name: "batch/line-ids-out-of-vocab", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"prompt_ids": [99999999]}` + "\n", want: `line 1.*99999999`},
		{name: "batch/line-temp-negative", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"prompt": "hi", "temperature": -1}` + "\n", want: `line 1.*temperature`},
		{name: "batch/line-max-tokens-negative", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"prompt": "hi", "max_tokens": -1}` + "\n", want: `line 1.*max_tokens`},
		{name: "batch/line-top-p-2", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"prompt": "hi", "top_p": 2}` + "\n", want: `line 1.*top_p`},
		{name: "batch/line-huge-number", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"prompt": "hi", "max_tokens": 1e400}` + "\n", want: `line 1`},
		{name: "batch/line-messages-bad-role", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: `{"messages": [{"role": 5, "content": "x"}]}` + "\n", want: `line 1`},
		{name: "batch/empty", args: []string{"batch", "--model", "{M}", "--prompts", "-"}, stdin: "", want: `(no prompts|empty)`},
		{name: "batch/max-batch-zero", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--max-batch", "0"}, stdin: `{"prompt": "hi"}` + "\n", want: `--max-batch 0`},
		{name: "batch/max-prompts-one", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--max-prompts", "1", "--max-tokens", "2"}, stdin: `{"prompt": "hi"}` + "\n" + `{"prompt": "ho"}` + "\n", want: `--max-prompts 1`},
		{name: "batch/prefill-batch-zero", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--prefill-batch", "0"}, stdin: `{"prompt": "hi"}` + "\n", want: `--prefill-batch 0`},
		{name: "batch/kv-cache-turbo", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--kv-cache", "turbo"}, stdin: `{"prompt": "hi"}` + "\n", want: `turbo`},
		{name: "batch/ok", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--max-tokens", "2"}, stdin: `{"prompt": "hi"}` + "\n", ok: true},
		// cache-prompt.
		{name: "cache-prompt/out-dir", args: []string{"cache-prompt", "--model", "{M}", "--prompt", "hi", "--prompt-cache-file", "{D}/o"}, files: map[string]string{"o": "@dir"}, want: `/o`},
		{name: "cache-prompt/out-missing-dir", args: []string{"cache-prompt", "--model", "{M}", "--prompt", "hi", "--prompt-cache-file", "{D}/no/such/c"}, want: `no/such`},
		{name: "cache-prompt/no-file", args: []string{"cache-prompt", "--model", "{M}", "--prompt", "hi"}, want: `--prompt-cache-file`},
		{name: "cache-prompt/max-kv-size-3", args: []string{"cache-prompt", "--model", "{M}", "--prompt", "hi", "--prompt-cache-file", "{D}/c", "--max-kv-size", "3"}, want: `--max-kv-size.*max KV size 3`},
		// convert.
		{name: "convert/gguf-zero", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": "@zero"}, want: `/g: not a regular file`},
		{name: "convert/gguf-dir", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": "@dir"}, want: `/g: not a regular file`},
		{name: "convert/gguf-missing", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, want: `/g.*no such file`},
		{name: "convert/gguf-truncated", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": string(ggufData[:len(ggufData)/2])}, want: `/g`},
		{name: "convert/gguf-header-only", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": string(ggufData[:64])}, want: `/g`},
		{name: "convert/dtype-int8", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o", "--dtype", "int8"}, want: `--dtype "int8": want float16, bfloat16 or float32`},
		{name: "convert/dtype-unknown", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o", "--dtype", "half"}, want: `--dtype "half": want float16, bfloat16 or float32`},
		{name: "convert/gguf-count-huge", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": "GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\xff\xff\xff\xff\xff\xff\xff\x7f"}, want: `/g`},
		{name: "convert/gguf-not-gguf", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": "PK\x03\x04 not a gguf file at all"}, want: `/g.*(magic|GGUF)`},
		{name: "convert/gguf-tensor-type", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": ggufType}, want: `attn_norm.*(type|99)|(type|99).*attn_norm`},
		{name: "convert/gguf-tensor-huge-dim", args: []string{"convert", "--gguf", "{D}/g", "--out", "{D}/o"}, files: map[string]string{"g": ggufHugeDim}, want: `attn_norm`},
		{name: "convert/out-is-file", args: []string{"convert", "--gguf", gguf, "--out", "{D}/o"}, files: map[string]string{"o": "x"}, want: `/o`},
		{name: "convert/bits-7", args: []string{"convert", "--gguf", gguf, "--out", "{D}/o", "--requantize", "--bits", "7"}, want: `--bits 7`},
		{name: "convert/no-out", args: []string{"convert", "--gguf", gguf}, want: `--out`},
		// fuse.
		{name: "fuse/adapter-missing", args: []string{"fuse", "--model", "{M}", "--adapter-path", "{D}/nope", "--save-path", "{D}/f"}, want: `nope`},
		{name: "fuse/adapter-other-rank", args: []string{"fuse", "--model", "{M}", "--adapter-path", "{D}/a", "--save-path", "{D}/f"}, files: map[string]string{"a/adapter_config.json": `{"num_layers": 1, "lora_parameters": {"rank": 4, "scale": 5}}`, "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `want F32 \[128 4\]`},
		{name: "fuse/save-path-is-file", args: []string{"fuse", "--model", "{M}", "--adapter-path", "{ADAPTER}", "--save-path", "{D}/f"}, files: map[string]string{"f": "x"}, want: `/f`},
		{name: "fuse/no-save-path", args: []string{"fuse", "--model", "{M}", "--adapter-path", "{ADAPTER}", "--save-path", ""}, want: `--save-path`},
		{name: "fuse/ok", args: []string{"fuse", "--model", "{M}", "--adapter-path", "{ADAPTER}", "--save-path", "{D}/f"}, ok: true},
		// lora.
		{name: "lora/data-zero", args: []string{"lora", "--model", "{M}", "--train", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, files: map[string]string{"d/train.jsonl": "@zero"}, want: `train.jsonl: not a regular file`},
		{name: "lora/data-is-file", args: []string{"lora", "--model", "{M}", "--train", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, files: map[string]string{"d": "x"}, want: `/d is not a directory`},
		{name: "lora/data-missing", args: []string{"lora", "--model", "{M}", "--train", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, want: `/d.*no such file`},
		{name: "lora/data-bad-line", args: []string{"lora", "--model", "{M}", "--train", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, files: map[string]string{"d/train.jsonl": "{\"text\": \"a\"}\n{\"text\": 5}\n"}, want: `train.jsonl:2`},
		{name: "lora/data-empty", args: []string{"lora", "--model", "{M}", "--train", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, files: map[string]string{"d/train.jsonl": ""}, want: `training set not found or empty`},
		{name: "lora/data-too-few", args: []string{"lora", "--model", "{M}", "--train", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--batch-size", "8", "--num-layers", "1", "--adapter-path", "{D}/a"}, files: map[string]string{"d/train.jsonl": `{"text": "a b"}` + "\n"}, want: `batch_size=8`},
		{name: "lora/orpo-attention-bogus", args: []string{"lora", "--model", "{M}", "--train", "--loss", "orpo", "--orpo-attention", "flash", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, want: `--orpo-attention "flash": want blocked or dense`},
		{name: "lora/orpo-attention-two-forwards", args: []string{"lora", "--model", "{M}", "--train", "--loss", "orpo", "--orpo-attention", "dense", "--orpo-two-forwards", "--data", "{D}/d", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, want: `--orpo-attention dense applies to the prefix-shared forward`},
		{name: "lora/config-zero", args: []string{"lora", "-c", "{D}/c.yaml"}, files: map[string]string{"c.yaml": "@zero"}, want: `c.yaml: not a regular file`},
		{name: "lora/config-bad-yaml", args: []string{"lora", "-c", "{D}/c.yaml"}, files: map[string]string{"c.yaml": "model: [\n"}, want: `c.yaml`},
		{name: "lora/config-unknown-key", args: []string{"lora", "-c", "{D}/c.yaml"}, files: map[string]string{"c.yaml": "model: x\nlearning_rat: 1\n"}, want: `c.yaml.*learning_rat`},
		{name: "lora/config-aliases", args: []string{"lora", "-c", "{D}/c.yaml"}, files: map[string]string{"c.yaml": "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"}, want: `c.yaml`},
		{name: "lora/config-lr-nan", args: []string{"lora", "-c", "{D}/c.yaml", "--data", "{DATA}", "--adapter-path", "{D}/a"}, files: map[string]string{"c.yaml": "model: {M}\ntrain: true\nlearning_rate: .nan\n"}, want: `learning_rate NaN`},
		{name: "lora/config-rank-huge", args: []string{"lora", "-c", "{D}/c.yaml", "--data", "{DATA}", "--adapter-path", "{D}/a", "--iters", "1"}, files: map[string]string{"c.yaml": "model: {M}\ntrain: true\nnum_layers: 1\nlora_parameters:\n  rank: 1000000000\n  scale: 20\n  dropout: 0\n"}, want: `rank 1000000000 exceeds`},
		{name: "lora/config-schedule-no-name", args: []string{"lora", "-c", "{D}/c.yaml", "--data", "{DATA}", "--adapter-path", "{D}/a"}, files: map[string]string{"c.yaml": "model: {M}\ntrain: true\nlr_schedule:\n  warmup: 5\n"}, want: `lr_schedule has no name`},
		{name: "lora/config-beta-2", args: []string{"lora", "-c", "{D}/c.yaml", "--data", "{DATA}", "--adapter-path", "{D}/a"}, files: map[string]string{"c.yaml": "model: {M}\ntrain: true\noptimizer_config:\n  adam:\n    betas: [2, 0.9]\n"}, want: `beta1`},
		{name: "lora/batch-size-zero", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--batch-size", "0"}, want: `batch_size 0`},
		{name: "lora/iters-negative", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--iters", "-1"}, want: `iters -1`},
		{name: "lora/learning-rate-nan", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--learning-rate", "NaN"}, want: `learning_rate NaN`},
		{name: "lora/num-layers-99", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--num-layers", "99", "--adapter-path", "{D}/a"}, want: `99 layers`},
		{name: "lora/max-seq-zero", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--max-seq-length", "0"}, want: `max_seq_length 0`},
		{name: "lora/val-batches-zero", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--val-batches", "0"}, want: `val_batches 0`},
		{name: "lora/seed-negative", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--seed", "-1"}, want: `seed -1`},
		{name: "lora/fine-tune-full", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--fine-tune-type", "full"}, want: `fine_tune_type "full"`},
		{name: "lora/optimizer-bogus", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--optimizer", "lion"}, want: `optimizer "lion"`},
		{name: "lora/resume-zero", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a", "--resume-adapter-file", "{D}/r"}, files: map[string]string{"r": "@zero"}, want: `/r: not a regular file`},
		{name: "lora/resume-other-rank", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--iters", "1", "--num-layers", "1", "--adapter-path", "{D}/a", "--resume-adapter-file", "{ADAPTERW}"}, want: `the adapter's is \[128 8\]`},
		{name: "lora/test-no-adapter", args: []string{"lora", "--model", "{M}", "--test", "--data", "{DATA}", "--adapter-path", "{D}/nope"}, want: `nope`},
		{name: "lora/no-model", args: []string{"lora", "--train"}, want: `--model`},
		{name: "lora/ok", args: []string{"lora", "--model", "{M}", "--train", "--data", "{DATA}", "--iters", "1", "--batch-size", "1", "--num-layers", "1", "--adapter-path", "{D}/a"}, ok: true},
		// diff.
		{name: "diff/worst-negative", args: []string{"diff", "--model", "{M}", "--worst", "-1"}, want: `--worst -1`},
		{name: "diff/worst-zero", args: []string{"diff", "--model", "{M}", "--worst", "0"}, want: `--worst 0`},
		{name: "diff/a-bogus", args: []string{"diff", "--model", "{M}", "--a", "tpu", "--b", "cpu"}, want: `tpu`},
		{name: "diff/b-zero", args: []string{"diff", "--model", "{M}", "--a", "cpu", "--b", "{D}/t"}, files: map[string]string{"t": "@zero"}, want: `/t: not a regular file`},
		{name: "diff/b-truncated", args: []string{"diff", "--model", "{M}", "--a", "cpu", "--b", "{D}/t"}, files: map[string]string{"t": string(full[:100])}, want: `/t`},
		{name: "diff/exact-bogus", args: []string{"diff", "--model", "{M}", "--exact", "maybe"}, want: `--exact "maybe", want auto, on or off`},
		{name: "diff/op-bogus", args: []string{"diff", "--model", "{M}", "--a", "cpu", "--b", "cpu:high", "--prompt-ids", "1,2", "--op", "frobnicate"}, want: `frobnicate`},
		{name: "diff/format-bogus", args: []string{"diff", "--model", "{M}", "--format", "xml"}, want: `--format`},
		{name: "diff/prompt-ids-bad", args: []string{"diff", "--model", "{M}", "--a", "cpu", "--b", "cpu:high", "--prompt-ids", "1,,x"}, want: `--prompt-ids`},
		{name: "diff/prompt-ids-out-of-vocab", args: []string{"diff", "--model", "{M}", "--a", "cpu", "--b", "cpu:high", "--prompt-ids", "5000"}, want: `5000`},
		{name: "diff/plot-dir", args: []string{"diff", "--model", "{M}", "--a", "cpu", "--b", "cpu:high", "--prompt-ids", "1,2", "--plot", "{D}/p"}, files: map[string]string{"p": "@dir"}, want: `/p`},
		// bench (flags only: every input is refused before anything runs).
		{name: "bench/reps-zero", args: []string{"bench", "--model", "{M}", "--reps", "0"}, want: `--reps 0`},
		{name: "bench/reps-negative", args: []string{"bench", "--model", "{M}", "--reps", "-3"}, want: `--reps -3`},
		{name: "bench/decode-tokens-negative", args: []string{"bench", "--model", "{M}", "--decode-tokens", "-1"}, want: `--decode-tokens -1`},
		{name: "bench/prompt-lens-word", args: []string{"bench", "--model", "{M}", "--prompt-lens", "a"}, want: `--prompt-lens`},
		{name: "bench/prompt-lens-negative", args: []string{"bench", "--model", "{M}", "--prompt-lens", "-5"}, want: `--prompt-lens`},
		{name: "bench/threads-negative", args: []string{"bench", "--model", "{M}", "--threads", "-1"}, want: `--threads -1`},
		{name: "bench/warmup-negative", args: []string{"bench", "--model", "{M}", "--warmup", "-1"}, want: `--warmup -1`},
		{name: "bench/contexts-word", args: []string{"bench", "--model", "{M}", "--contexts", "x"}, want: `--contexts`},
		{name: "bench/batch-sizes-zero", args: []string{"bench", "--model", "{M}", "--batch-sizes", "0"}, want: `--batch-sizes`},
		{name: "bench/configs-bogus", args: []string{"bench", "--model", "{M}", "--configs", "gpu-warp"}, want: `gpu-warp`},
		{name: "bench/kv-cache-bogus", args: []string{"bench", "--model", "{M}", "--kv-cache", "bogus"}, want: `--kv-cache applies only to the context sweep`},
		{name: "bench/contexts-kv-cache-bogus", args: []string{"bench", "--model", "{M}", "--contexts", "1k", "--kv-cache", "bogus"}, want: `--kv-cache bogus`},
		{name: "bench/model-zero-config", args: []string{"bench", "--model", "{D}/m", "--reps", "1"}, files: map[string]string{"m/config.json": "@zero"}, want: `config.json: not a regular file`},
		{name: "bench/ids-file-zero", args: []string{"bench", "--model", "{M}", "--ids-file", "{D}/i"}, files: map[string]string{"i": "@zero"}, want: `--ids-file is internal`},
		{name: "bench/report-zero", args: []string{"bench", "--report", "{D}/r.json"}, files: map[string]string{"r.json": "@zero"}, want: `r.json: not a regular file`},
		{name: "bench/report-truncated", args: []string{"bench", "--report", "{D}/r.json"}, files: map[string]string{"r.json": `{"rows": [`}, want: `r.json`},
		{name: "bench/rounds-zero", args: []string{"bench", "--model", "{M}", "--rounds", "0"}, want: `--rounds 0`},
		{name: "bench/num-draft-negative", args: []string{"bench", "--model", "{M}", "--num-draft-tokens", "-2"}, want: `--num-draft-tokens -2`},
		// synth.
		{name: "synth/layers-zero", args: []string{"synth", "--out", "{D}/s", "--layers", "0"}, want: `layers is 0, want > 0`},
		{name: "synth/layers-huge", args: []string{"synth", "--out", "{D}/s", "--layers", "1000000000"}, want: `layers is 1000000000, more than the limit`},
		{name: "synth/hidden-huge", args: []string{"synth", "--out", "{D}/s", "--hidden", "1000000000"}, want: `hidden is 1000000000, more than the limit`},
		{name: "synth/vocab-zero", args: []string{"synth", "--out", "{D}/s", "--vocab", "0"}, want: `vocab is 0, want > 0`},
		{name: "synth/head-dim-7", args: []string{"synth", "--out", "{D}/s", "--head-dim", "7"}, want: `head.dim`},
		{name: "synth/kv-heads-3", args: []string{"synth", "--out", "{D}/s", "--kv-heads", "3"}, want: `kv.heads`},
		{name: "synth/quant-bogus", args: []string{"synth", "--out", "{D}/s", "--quant", "q9g7"}, want: `q9g7`},
		{name: "synth/dtype-bogus", args: []string{"synth", "--out", "{D}/s", "--dtype", "f12"}, want: `f12`},
		{name: "synth/preset-bogus", args: []string{"synth", "--out", "{D}/s", "--preset", "gpt5"}, want: `gpt5`},
		{name: "synth/group-size-48", args: []string{"synth", "--out", "{D}/s", "--quant", "q4g32", "--group-size", "48"}, want: `48`},
		{name: "synth/eps-nan", args: []string{"synth", "--out", "{D}/s", "--rms-norm-eps", "NaN"}, want: `rms norm eps NaN must be > 0`},
		{name: "synth/rope-theta-negative", args: []string{"synth", "--out", "{D}/s", "--rope-theta", "-1"}, want: `rope theta -1 and`},
		{name: "synth/format-bogus", args: []string{"synth", "--out", "{D}/s", "--format", "onnx"}, want: `onnx`},
		// Writing where the user points, a device included, is allowed (as
		// a shell redirection is).
		{name: "synth/out-zero", args: []string{"synth", "--preset", "tiny", "--out", "{D}/z", "--format", "gguf"}, files: map[string]string{"z": "@zero"}, ok: true},
		{name: "synth/no-out", args: []string{"synth"}, want: `--out`},
		{name: "synth/max-positions-zero", args: []string{"synth", "--out", "{D}/s", "--max-positions", "0"}, want: `max-positions is 0`},
		// serve flags and models.
		{name: "serve/port-negative", args: []string{"serve", "--model", "{M}", "--port", "-1"}, want: `--port -1`},
		{name: "serve/port-huge", args: []string{"serve", "--model", "{M}", "--port", "70000"}, want: `--port 70000`},
		{name: "serve/max-concurrency-zero", args: []string{"serve", "--model", "{M}", "--port", "0", "--max-concurrency", "0"}, want: `--max-concurrency 0`},
		{name: "serve/queue-size-negative", args: []string{"serve", "--model", "{M}", "--port", "0", "--queue-size", "-1"}, want: `--queue-size -1`},
		{name: "serve/max-body-zero", args: []string{"serve", "--model", "{M}", "--port", "0", "--max-body-bytes", "0"}, want: `--max-body-bytes 0`},
		{name: "serve/prompt-cache-negative", args: []string{"serve", "--model", "{M}", "--port", "0", "--prompt-cache-bytes", "-1"}, want: `--prompt-cache-bytes -1`},
		{name: "serve/temp-nan", args: []string{"serve", "--model", "{M}", "--port", "0", "--temp", "NaN"}, want: `--temp NaN`},
		{name: "serve/write-timeout-negative", args: []string{"serve", "--model", "{M}", "--port", "0", "--write-timeout", "-1s"}, want: `--write-timeout`},
		{name: "serve/prefill-concurrency-zero", args: []string{"serve", "--model", "{M}", "--port", "0", "--prefill-concurrency", "0"}, want: `--prefill-concurrency 0`},
		{name: "serve/host-bad", args: []string{"serve", "--model", "{M}", "--host", "999.1.1.1", "--port", "0"}, want: `999.1.1.1`},
		{name: "serve/adapter-other-rank", args: []string{"serve", "--model", "{M}", "--port", "0", "--adapter-path", "{D}/a"}, files: map[string]string{"a/adapter_config.json": `{"num_layers": 1, "lora_parameters": {"rank": 4, "scale": 5}}`, "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `adapters.safetensors.*want F32 \[128 4\]`},
		{name: "chat/adapter-config-zero", args: []string{"chat", "--model", "{M}", "--adapter-path", "{D}/a"}, stdin: "hi\n", files: map[string]string{"a/adapter_config.json": "@zero", "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `adapter_config.json: not a regular file`},
		{name: "batch/adapter-other-rank", args: []string{"batch", "--model", "{M}", "--prompts", "-", "--adapter-path", "{D}/a"}, stdin: `{"prompt": "hi"}` + "\n", files: map[string]string{"a/adapter_config.json": `{"num_layers": 1, "lora_parameters": {"rank": 4, "scale": 5}}`, "a/adapters.safetensors": "@copy:{ADAPTERW}"}, want: `want F32 \[128 4\]`},
		{name: "serve/no-model", args: []string{"serve"}, want: `--model`},
		// pull (the Hub is unreachable here: HF_ENDPOINT is a closed port).
		{name: "pull/no-repo", args: []string{"pull"}, want: `ORG/NAME|repo`},
		{name: "pull/repo-traversal", args: []string{"pull", "../../etc"}, want: `\.\./\.\./etc`},
		{name: "pull/repo-three-parts", args: []string{"pull", "a/b/c"}, want: `a/b/c`},
		{name: "pull/revision-traversal", args: []string{"pull", "org/name", "--revision", "../x"}, want: `\.\./x`},
		// "[" matches itself, as in fnmatch (huggingface_hub's matcher): the
		// pull goes on and fails on the unreachable Hub.
		{name: "pull/pattern-bracket", args: []string{"pull", "org/name", "--allow-patterns", "["}, env: []string{"HF_HUB_CACHE={D}/hub"}, want: `127.0.0.1:9`},
		{name: "pull/unreachable", args: []string{"pull", "org/name"}, env: []string{"HF_HUB_CACHE={D}/hub"}, want: `127.0.0.1:9`},
		{name: "pull/offline", args: []string{"pull", "org/name"}, env: []string{"HF_HUB_OFFLINE=1", "HF_HUB_CACHE={D}/hub"}, want: `offline|HF_HUB_OFFLINE`},
		{name: "pull/endpoint-bad", args: []string{"pull", "org/name"}, env: []string{"HF_ENDPOINT=ftp://x", "HF_HUB_CACHE={D}/hub"}, want: `ftp://x|HF_ENDPOINT`},
		// loadtest.
		{name: "loadtest/clients-zero", args: []string{"loadtest", "--model", "{M}", "--clients", "0"}, want: `--clients 0`},
		{name: "loadtest/requests-negative", args: []string{"loadtest", "--model", "{M}", "--requests", "-1"}, want: `--requests -1`},
		{name: "loadtest/duration-negative", args: []string{"loadtest", "--model", "{M}", "--duration", "-1s"}, want: `--duration`},
		{name: "loadtest/url-ftp", args: []string{"loadtest", "--url", "ftp://x"}, want: `ftp://x`},
		{name: "loadtest/url-unreachable", args: []string{"loadtest", "--url", "http://127.0.0.1:9", "--requests", "1", "--clients", "1"}, want: `127.0.0.1:9`},
		{name: "loadtest/malformed-2", args: []string{"loadtest", "--model", "{M}", "--malformed", "2"}, want: `--malformed 2`},
		{name: "loadtest/cancel-nan", args: []string{"loadtest", "--model", "{M}", "--cancel", "NaN"}, want: `--cancel NaN`},
		{name: "loadtest/slow-negative", args: []string{"loadtest", "--model", "{M}", "--slow", "-1"}, want: `--slow -1`},
		{name: "loadtest/stream-nan", args: []string{"loadtest", "--model", "{M}", "--stream", "NaN"}, want: `--stream NaN`},
		{name: "loadtest/stream-2", args: []string{"loadtest", "--model", "{M}", "--stream", "2"}, want: `--stream 2`},
		{name: "loadtest/prompt-words-bad", args: []string{"loadtest", "--model", "{M}", "--prompt-words", "a,b"}, want: `--prompt-words`},
		{name: "loadtest/tokens-zero", args: []string{"loadtest", "--model", "{M}", "--tokens", "0"}, want: `--tokens 0`},
		{name: "loadtest/model-and-url", args: []string{"loadtest", "--model", "{M}", "--url", "http://127.0.0.1:9"}, want: `--url`},
		// kvquality.
		{name: "kvquality/kinds-bogus", args: []string{"kvquality", "--model", "{O}", "--prompt-ids", "1,2,3", "--kinds", "kv9"}, want: `kv9`},
		{name: "kvquality/kinds-empty", args: []string{"kvquality", "--model", "{O}", "--prompt-ids", "1,2,3", "--kinds", ""}, want: `--kinds`},
		{name: "kvquality/steps-zero", args: []string{"kvquality", "--model", "{O}", "--prompt-ids", "1,2,3", "--steps", "0"}, want: `--steps 0`},
		{name: "kvquality/steps-negative", args: []string{"kvquality", "--model", "{O}", "--prompt-ids", "1,2,3", "--steps", "-5"}, want: `--steps -5`},
		{name: "kvquality/prompt-ids-bad", args: []string{"kvquality", "--model", "{O}", "--prompt-ids", "1,x"}, want: `--prompt-ids`},
		{name: "kvquality/prompt-ids-out-of-vocab", args: []string{"kvquality", "--model", "{O}", "--prompt-ids", "77777", "--kinds", "kv8", "--steps", "2"}, want: `77777`},
		{name: "kvquality/no-prompt", args: []string{"kvquality", "--model", "{O}"}, want: `--prompt`},
		{name: "kvquality/turbo-headdim", args: []string{"kvquality", "--model", "{M}", "--prompt-ids", "1,2,3", "--steps", "2", "--kinds", "turbo"}, want: `head_dim 32`},
		// conform.
		{name: "conform/fixtures-missing", args: []string{"conform", "--fixtures", "{D}/nope"}, want: `nope`},
		{name: "conform/manifest-zero", args: []string{"conform", "--fixtures", "{D}/f"}, files: map[string]string{"f/manifest.json": "@zero"}, want: `manifest.json: not a regular file`},
		{name: "conform/manifest-truncated", args: []string{"conform", "--fixtures", "{D}/f"}, files: map[string]string{"f/manifest.json": `{"cases": [`}, want: `manifest.json`},
		{name: "conform/manifest-escape", args: []string{"conform", "--fixtures", "{D}/f"}, files: map[string]string{"f/manifest.json": `{"format": 1, "cases": [{"name": "c", "kind": "op", "file": "../../../etc/passwd"}]}`}, want: `(outside|\.\./)`},
		{name: "conform/run-bad-regexp", args: []string{"conform", "--fixtures", "{FIX}", "--run", "("}, want: `no cases in .* match "\("`},
		{name: "conform/backend-bogus", args: []string{"conform", "--fixtures", "{FIX}", "--backend", "tpu"}, want: `tpu`},
		// Unknown command.
		{name: "mlxgo/unknown-command", args: []string{"frobnicate"}, want: `frobnicate`},
	}
	return cases
}

// hostileHTTP starts mlxgo serve on the valid model and sends it bad
// requests: each must be answered with a 4xx status and an error JSON,
// and the server must still answer a valid request after all of them and
// stop cleanly with no panic on its stderr.
func hostileHTTP(t *testing.T, good string) map[string]int {
	t.Helper()
	url, stderr := startServe(t, "--model", good, "--port", "0", "--max-tokens", "4", "--max-body-bytes", "65536")
	counts := map[string]int{}
	big := `{"messages": [{"role": "user", "content": "` + strings.Repeat("a", 70000) + `"}]}`
	for _, r := range []struct {
		name, method, path, body string
		status                   int // 0: any 4xx
	}{
		{"not json", "POST", "/v1/chat/completions", `{"messages": [`, 400},
		{"empty body", "POST", "/v1/chat/completions", ``, 400},
		{"array body", "POST", "/v1/chat/completions", `[]`, 400},
		{"no messages", "POST", "/v1/chat/completions", `{}`, 400},
		{"messages not a list", "POST", "/v1/chat/completions", `{"messages": 5}`, 400},
		{"role a number", "POST", "/v1/chat/completions", `{"messages": [{"role": 5, "content": "x"}]}`, 400},
		{"content an object", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": {"a": 1}}]}`, 400},
		{"temperature negative", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "temperature": -1}`, 400},
		{"temperature string", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}`, 400},
		{"top_p 2", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "top_p": 2}`, 400},
		{"max_tokens negative", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}`, 400},
		{"max_tokens huge", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e30}`, 400},
		{"n 5", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "n": 5}`, 400},
		{"stop a number", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "stop": 5}`, 400},
		{"logprobs huge", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 100000}`, 400},
		{"seed negative", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "seed": -1}`, 400},
		{"body over the cap", "POST", "/v1/chat/completions", big, 413},
		{"completions prompt ids out of vocab", "POST", "/v1/completions", `{"prompt": [99999999]}`, 400},
		{"completions prompt an object", "POST", "/v1/completions", `{"prompt": {"a": 1}}`, 400},
		{"deep nesting", "POST", "/v1/chat/completions", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), 400},
		{"unknown route", "POST", "/v1/embeddings", `{}`, 404},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405},
	} {
		req, err := http.NewRequest(r.method, url+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			counts["wrong answer"]++
			t.Errorf("http %s: %v", r.name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		isErrJSON := json.Unmarshal(body, &e) == nil && e.Error.Message != ""
		if resp.StatusCode/100 != 4 || (r.status != 0 && resp.StatusCode != r.status) || !isErrJSON {
			counts["wrong answer"]++
			t.Errorf("http %s: status %d (want %d), body %s", r.name, resp.StatusCode, r.status, clip(string(body), 300))
			continue
		}
		counts["answered 4xx with an error JSON"]++
	}
	// A client that sends half a body and hangs up, and a valid request
	// after everything.
	if req, err := http.NewRequest("POST", url+"/v1/chat/completions", io.MultiReader(strings.NewReader(`{"messages": [`), slowReader{time.Second})); err == nil {
		c := &http.Client{Timeout: 300 * time.Millisecond}
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`)))
	if err != nil || resp.StatusCode != 200 {
		counts["wrong answer"]++
		t.Errorf("a valid request after the bad ones: %v %v", err, resp)
	} else {
		resp.Body.Close()
		counts["answered 200"]++
	}
	if s := stderr(); panicMarks.MatchString(s) {
		t.Errorf("serve's stderr has a panic:\n%s", clip(s, 3000))
	}
	return counts
}

// slowReader blocks for d and then ends.
type slowReader struct{ d time.Duration }

func (s slowReader) Read([]byte) (int, error) {
	time.Sleep(s.d)
	return 0, io.EOF
}
