package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/tensor"
)

// The hostile-input sweep (issue 19): every command of mlxgo run as a
// separate process on bad files, bad flags, bad templates and bad HTTP
// requests. Each input must end with a non-zero exit status (unless the
// case says the input is valid) and an error on stderr that names what was
// wrong (the case's want), with no panic or Go stack trace, within
// hostileTimeout and under hostileMaxRSS of resident memory (the process
// also runs under a 4 GB address-space limit, so a runaway allocation
// fails rather than swapping the machine).
//
// It runs about 340 processes, so it runs only with MLXGO_HOSTILE=1 (make
// hostile); it prints the count of inputs and of each outcome.

const (
	hostileTimeout = 30 * time.Second
	hostileMaxRSS  = 2 << 30
	hostileASLimit = 4 << 30
)

// hostileCase is one command line. In args and stdin, {M} is a valid
// model directory (with tokenizer and chat template), {D} the case's own
// directory (holding its files), {ADAPTER} a valid adapter directory for
// {M} and {DATA} a valid training data directory.
type hostileCase struct {
	name  string
	args  []string
	files map[string]string // under {D}: contents, or "@zero" (a link to /dev/zero), "@dir" (a directory), "@copy:PATH"
	stdin string
	want  string // a regexp stderr must match; "" with ok
	ok    bool   // the input is valid: exit 0 expected
	env   []string
}

// outcome is what a case ended with.
type outcome struct {
	rc      int
	stderr  string
	elapsed time.Duration
	rss     int64
	timeout bool
}

var panicMarks = regexp.MustCompile(`(?m)^(panic:|fatal error:|goroutine \d+ \[|SIGSEGV|runtime\.)|\.go:\d+ \+0x`)

// runHostile runs args as mlxgo (this test binary standing in for it)
// under the address-space limit and the timeout.
func runHostile(t *testing.T, dir string, args []string, stdin string, env []string) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh := fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, hostileASLimit>>10)
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", sh, self}, args...)...)
	cmd.Env = append(append(os.Environ(), "MLXGO_TEST_AS_MLXGO=1", "HF_HUB_OFFLINE=", "HF_ENDPOINT=http://127.0.0.1:9"), env...)
	cmd.Dir = dir // whatever a command writes beside it stays in the case's directory
	cmd.Stdin = strings.NewReader(stdin)
	var errOut bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &errOut
	start := time.Now()
	err = cmd.Run()
	o := outcome{elapsed: time.Since(start), stderr: errOut.String(), timeout: ctx.Err() != nil}
	if cmd.ProcessState != nil {
		o.rc = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			o.rss = ru.Maxrss << 10
		}
	} else if err != nil {
		o.rc = -1
		o.stderr += err.Error()
	}
	return o
}

// hostileVariants are bad model directories: the valid one with one file
// replaced. Each maps to a regexp its error must match.
func hostileVariants(t *testing.T, good, root string) map[string]string {
	t.Helper()
	tok := func(s string) map[string]string { return map[string]string{"tokenizer_config.json": s} }
	tmpl := func(tpl string) map[string]string {
		b, _ := json.Marshal(map[string]any{"eos_token": "<|im_end|>", "bos_token": nil, "chat_template": tpl})
		return tok(string(b))
	}
	readCfg := func() map[string]any {
		data, err := os.ReadFile(filepath.Join(good, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	cfgWith := func(k string, v any) map[string]string {
		m := readCfg()
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return map[string]string{"config.json": string(b)}
	}
	hdr := func(h string) string {
		return string(binary.LittleEndian.AppendUint64(nil, uint64(len(h)))) + h
	}
	weights, err := os.ReadFile(filepath.Join(good, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the weights with one tensor changed by edit (nil drops it).
	rewrite := func(label, name string, edit func(d *tensor.Dense) *tensor.Dense) map[string]string {
		st, err := tensor.OpenSafetensors(filepath.Join(good, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var names []string
		var ts []*tensor.Dense
		for _, n := range st.Names() {
			d, err := st.TensorCopy(n)
			if err != nil {
				t.Fatal(err)
			}
			if n == name {
				if d = edit(d); d == nil {
					continue
				}
			}
			names, ts = append(names, n), append(ts, d)
		}
		p := filepath.Join(root, "rewrite-"+label+".safetensors")
		if err := tensor.WriteSafetensors(p, names, ts, st.Metadata()); err != nil {
			t.Fatal(err)
		}
		return map[string]string{"model.safetensors": "@copy:" + p}
	}
	norm := "model.layers.0.input_layernorm.weight"
	specs := map[string]struct {
		files map[string]string
		want  string
	}{
		"config-truncated":     {map[string]string{"config.json": `{"model_type": "llama", "hidden_size": 12`}, `config.json.*(unexpected end|EOF)`},
		"config-zero":          {map[string]string{"config.json": "@zero"}, `config.json: not a regular file: it is a device`},
		"config-dir":           {map[string]string{"config.json": "@dir"}, `config.json: not a regular file: it is a directory`},
		"config-missing":       {map[string]string{"config.json": "@rm"}, `config.json.*no such file`},
		"config-array":         {map[string]string{"config.json": `[]`}, `config.json`},
		"config-vocab-neg":     {cfgWith("vocab_size", -1), `config.json.*vocab_size`},
		"config-layers-huge":   {cfgWith("num_hidden_layers", 1e9), `config.json.*num_hidden_layers`},
		"config-headdim-huge":  {cfgWith("head_dim", 1<<30), `config.json.*head_dim`},
		"config-hidden-string": {cfgWith("hidden_size", "abc"), `config.json.*hidden_size`},
		"config-type-gpt2":     {cfgWith("model_type", "gpt2"), `config.json.*model_type.*gpt2`},
		"config-eos-negative":  {cfgWith("eos_token_id", -7), `config.json.*eos_token_id`},
		"config-heads-zero":    {cfgWith("num_attention_heads", 0), `config.json.*num_attention_heads`},
		"config-quant-bits7":   {cfgWith("quantization", map[string]any{"group_size": 64, "bits": 7}), `config.json.*bits`},
		"config-rope-bad":      {cfgWith("rope_scaling", map[string]any{"rope_type": "yarn", "factor": -1}), `config.json.*rope`},
		"config-eps-nan":       {map[string]string{"config.json": regexp.MustCompile(`"rms_norm_eps":[^,}]*`).ReplaceAllString(mustJSON(readCfg()), `"rms_norm_eps":NaN`)}, `config.json.*invalid character 'N'`},
		"weights-truncated":    {map[string]string{"model.safetensors": string(weights[:len(weights)/2])}, `model.safetensors`},
		"weights-zero":         {map[string]string{"model.safetensors": "@zero"}, `model.safetensors: not a regular file: it is a device`},
		"weights-dir":          {map[string]string{"model.safetensors": "@dir"}, `model.safetensors: not a regular file: it is a directory`},
		"weights-empty":        {map[string]string{"model.safetensors": ""}, `model.safetensors.*shorter than`},
		"weights-header-huge":  {map[string]string{"model.safetensors": string(binary.LittleEndian.AppendUint64(nil, 1<<62)) + "{"}, `model.safetensors.*header length`},
		"weights-shape-huge":   {map[string]string{"model.safetensors": hdr(`{"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}`)}, `model.safetensors.*"a"`},
		"weights-not-json":     {map[string]string{"model.safetensors": hdr(`{"a": nope}`)}, `model.safetensors.*JSON`},
		"weights-missing-norm": {rewrite("missing-norm", norm, func(*tensor.Dense) *tensor.Dense { return nil }), `input_layernorm`},
		"weights-norm-shape":   {rewrite("norm-shape", norm, func(d *tensor.Dense) *tensor.Dense { return tensor.FromFloat32(tensor.Shape{7}, make([]float32, 7)) }), `input_layernorm.*\[7\]`},
		"weights-norm-int":     {rewrite("norm-int", norm, func(d *tensor.Dense) *tensor.Dense { return d.Convert(tensor.I32) }), `input_layernorm.*(I32|int32|dtype)`},
		"index-escape":         {map[string]string{"model.safetensors.index.json": `{"weight_map": {"model.norm.weight": "../../../../etc/passwd"}}`}, `model.safetensors.index.json.*(outside|\.\./)`},
		"index-zero":           {map[string]string{"model.safetensors.index.json": "@zero"}, `model.safetensors.index.json: not a regular file`},
		"tokenizer-truncated":  {map[string]string{"tokenizer.json": `{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0`}, `tokenizer.json`},
		"tokenizer-zero":       {map[string]string{"tokenizer.json": "@zero"}, `tokenizer.json: not a regular file: it is a device`},
		"tokenizer-dir":        {map[string]string{"tokenizer.json": "@dir"}, `tokenizer.json: not a regular file: it is a directory`},
		"tokenizer-empty-vocab": {map[string]string{"tokenizer.json": `{"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": {}, "merges": []}}`},
			`tokenizer.json.*(vocab|empty)`},
		"tokenizer-unigram":     {map[string]string{"tokenizer.json": `{"version": "1.0", "model": {"type": "WordPiece", "vocab": {"a": 0}}}`}, `tokenizer.json.*WordPiece`},
		"tokconfig-zero":        {tok("@zero"), `tokenizer_config.json: not a regular file`},
		"tokconfig-truncated":   {tok(`{"eos_token": "<|im_end|>", "chat_tem`), `tokenizer_config.json`},
		"tokconfig-eos-unknown": {tok(`{"eos_token": "<nope>", "chat_template": "x"}`), `eos_token.*<nope>`},
		"template-recursive":    {tmpl(`{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}`), `nesting of macro calls and recursive loops exceeds the limit of 100 \(MaxDepth\)`},
		"template-mul-huge":     {tmpl(`{{ 'a' * 4000000000 }}`), `(limit|output|size)`},
		"template-doubling":     {tmpl(`{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}`), `(limit|output|size)`},
		"template-nested-loops": {tmpl(`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`), `(steps|limit|time)`},
		"template-div-zero":     {tmpl(`{{ 1/0 }}`), `(division|zero)`},
		"template-raise":        {tmpl(`{{ raise_exception('no thanks') }}`), `no thanks`},
		"template-syntax":       {tmpl(`{% if %}`), `(template|syntax|parse)`},
		"template-include":      {tmpl(`{% include 'x.j2' %}`), `include`},
		"template-list-no-tpl":  {tok(`{"eos_token": "<|im_end|>", "chat_template": [{"name": "default"}]}`), `chat_template`},
		"template-source-huge":  {tmpl(strings.Repeat("a", 2<<20)), `template source in bytes exceeds the limit of 1048576 \(MaxTemplateSourceBytes\)`},
		"genconfig-zero":        {map[string]string{"generation_config.json": "@zero"}, `generation_config.json: not a regular file`},
		// Ignored by mlx_lm too; mlxgo says so ("ok:" = a valid input whose
		// stderr must match the rest).
		"genconfig-malformed": {map[string]string{"generation_config.json": `{"eos_token_id": `}, `ok:generation_config.json: ignored, does not parse`},
		"genconfig-eos-neg":   {map[string]string{"generation_config.json": `{"eos_token_id": -7}`}, `generation_config.json.*eos_token_id`},
		// mlx_lm reads only eos_token_id from generation_config.json; so
		// does mlxgo: a bad temperature there is ignored by both ("" = valid).
		"genconfig-temp-string": {map[string]string{"generation_config.json": `{"temperature": "hot"}`}, ``},
	}
	out := map[string]string{}
	for name, s := range specs {
		dir := filepath.Join(root, "model-"+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(good)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			src := filepath.Join(good, e.Name())
			if target, err := os.Readlink(src); err == nil {
				src = target
			}
			if err := os.Symlink(src, filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		placeFiles(t, dir, s.files)
		out[name] = s.want
	}
	return out
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// placeFiles puts files under dir (replacing what is there): contents, or
// "@zero" (a link to /dev/zero), "@dir" (a directory), "@rm" (nothing),
// "@copy:PATH" (a link to PATH).
func placeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, c := range files {
		p := filepath.Join(dir, name)
		os.Remove(p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case c == "@zero":
			err = os.Symlink("/dev/zero", p)
		case c == "@dir":
			err = os.Mkdir(p, 0o755)
		case c == "@rm":
		case strings.HasPrefix(c, "@copy:"):
			err = os.Symlink(strings.TrimPrefix(c, "@copy:"), p)
		default:
			err = os.WriteFile(p, []byte(c), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostileInputs runs the sweep (MLXGO_HOSTILE=1; make hostile).
func TestHostileInputs(t *testing.T) {
	if os.Getenv("MLXGO_HOSTILE") != "1" {
		t.Skip("the hostile-input sweep (about 340 processes) runs with MLXGO_HOSTILE=1: make hostile")
	}
	good := textFixture(t, chatML)
	root := t.TempDir()
	variants := hostileVariants(t, good, root)
	cases := hostileCases(t, good, root)
	// Every model variant through generate, and the file-level ones through
	// every command that loads a model.
	names := make([]string, 0, len(variants))
	for n := range variants {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		want := variants[n]
		m := filepath.Join(root, "model-"+n)
		valid := want == "" || strings.HasPrefix(want, "ok:")
		want = strings.TrimPrefix(want, "ok:")
		cases = append(cases, hostileCase{name: "generate/" + n, args: []string{"generate", "--model", m, "--prompt", "hi", "--max-tokens", "2"}, want: want, ok: valid})
		if strings.HasPrefix(n, "template-") || strings.HasPrefix(n, "tokconfig-") || strings.HasPrefix(n, "tokenizer-") || strings.HasPrefix(n, "genconfig-") {
			cases = append(cases,
				hostileCase{name: "chat/" + n, args: []string{"chat", "--model", m, "--max-tokens", "2"}, stdin: "hi\n", want: want, ok: valid},
				hostileCase{name: "batch/" + n, args: []string{"batch", "--model", m, "--prompts", "-", "--max-tokens", "2"}, stdin: `{"prompt": "hi"}` + "\n", want: want, ok: valid},
			)
			continue
		}
		if strings.HasSuffix(n, "-zero") || strings.HasSuffix(n, "-truncated") || strings.HasSuffix(n, "-dir") || n == "config-layers-huge" || n == "weights-norm-shape" {
			for _, c := range [][]string{
				{"chat", "--model", m, "--max-tokens", "2"},
				{"batch", "--model", m, "--prompts", "-", "--max-tokens", "2"},
				{"cache-prompt", "--model", m, "--prompt", "hi", "--prompt-cache-file", "{D}/c.safetensors"},
				{"kvquality", "--model", m, "--prompt-ids", "1,2,3", "--steps", "2"},
				{"fuse", "--model", m, "--adapter-path", "{ADAPTER}", "--save-path", "{D}/fused"},
				{"lora", "--model", m, "--train", "--data", "{DATA}", "--iters", "1", "--adapter-path", "{D}/ad"},
				{"diff", "--model", m, "--a", "cpu", "--b", "cpu:high", "--prompt-ids", "1,2"},
				{"serve", "--model", m, "--port", "0"},
				{"loadtest", "--model", m, "--clients", "1", "--requests", "1"},
			} {
				cases = append(cases, hostileCase{name: c[0] + "/" + n, args: c, stdin: `{"prompt": "hi"}` + "\n", want: want})
			}
		}
	}
	adapter, data := hostileAdapter(t, good, root), hostileData(t, root)
	counts := map[string]int{}
	var worstRSS int64
	var worstTime time.Duration
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(root, fmt.Sprintf("case%03d", i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fix, err := filepath.Abs(fixtures)
			if err != nil {
				t.Fatal(err)
			}
			repl := strings.NewReplacer("{FIX}", fix, "{M}", good, "{O}", filepath.Join(root, "other-model"), "{D}", dir, "{ADAPTERW}", filepath.Join(adapter, lora.WeightsFile), "{ADAPTER}", adapter, "{DATA}", data)
			files := map[string]string{}
			for k, v := range c.files {
				files[k] = repl.Replace(v)
			}
			placeFiles(t, dir, files)
			args := make([]string, len(c.args))
			for j, a := range c.args {
				args[j] = repl.Replace(a)
			}
			env := make([]string, len(c.env))
			for j, e := range c.env {
				env[j] = repl.Replace(e)
			}
			o := runHostile(t, dir, args, repl.Replace(c.stdin), env)
			worstRSS, worstTime = max(worstRSS, o.rss), max(worstTime, o.elapsed)
			verdict := ""
			switch {
			case o.timeout:
				verdict = "hang"
			case panicMarks.MatchString(o.stderr):
				verdict = "panic"
			case o.rss > hostileMaxRSS:
				verdict = "memory"
			case c.ok && o.rc != 0:
				verdict = "failed on valid input"
			case !c.ok && o.rc == 0:
				verdict = "silent success"
			case c.want != "" && !regexp.MustCompile("(?s)"+c.want).MatchString(o.stderr):
				verdict = "vague error"
			}
			t.Logf("exit %d, %v, %.0f MB: %s", o.rc, o.elapsed.Round(time.Millisecond), float64(o.rss)/1e6, clip(strings.TrimSpace(o.stderr), 400))
			if verdict == "" {
				if c.ok {
					counts["valid input accepted"]++
				} else {
					counts["named error"]++
				}
				return
			}
			counts[verdict]++
			t.Errorf("%s: %s (exit %d, %v, %.0f MB)\n  args: %q\n  want: %s\n  stderr: %s", c.name, verdict, o.rc, o.elapsed.Round(time.Millisecond), float64(o.rss)/1e6, args, c.want, clip(o.stderr, 1500))
		})
	}
	serveCounts := hostileHTTP(t, good)
	for k, v := range serveCounts {
		counts["http: "+k] += v
	}
	keys := make([]string, 0, len(counts))
	total := 0
	for k, v := range counts {
		keys = append(keys, k)
		if !strings.HasPrefix(k, "http: ") {
			total += v
		}
	}
	sort.Strings(keys)
	var sb strings.Builder
	fmt.Fprintf(&sb, "hostile-input sweep: %d command lines, %d HTTP requests; worst RSS %.0f MB, slowest %v\n", total, counts["http: answered 4xx with an error JSON"]+counts["http: answered 200"]+counts["http: wrong answer"], float64(worstRSS)/1e6, worstTime.Round(time.Millisecond))
	for _, k := range keys {
		fmt.Fprintf(&sb, "  %-40s %d\n", k, counts[k])
	}
	fmt.Print(sb.String())
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
