package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/tensor"
)

func TestParseSynthFlags(t *testing.T) {
	type got struct {
		layers, vocab, group int
		quant                string
		dt                   tensor.DType
		tied                 bool
	}
	for _, c := range []struct {
		name string
		args []string
		want string // error substring; "" for success
		spec got
	}{
		{"defaults", []string{"--out", "x"}, "", got{24, 130560, 64, "optiq", tensor.BF16, false}},
		{"overrides", []string{"--out", "x", "--layers", "2", "--vocab", "512", "--quant", "q8"}, "", got{2, 512, 64, "q8", tensor.BF16, false}},
		{"real preset", []string{"--out", "x", "--preset", "smollm2-135m"}, "", got{30, 49152, 32, "q4g32", tensor.BF16, true}},
		{"quant names the group", []string{"--out", "x", "--quant", "q3g128", "--dtype", "f16"}, "", got{24, 130560, 128, "q3g128", tensor.F16, false}},
		{"dense quant sets dtype", []string{"--out", "x", "--quant", "f32", "--tied"}, "", got{24, 130560, 64, "f32", tensor.F32, true}},
		{"embed bits", []string{"--out", "x", "--preset", "smollm2-135m", "--embed-bits", "3", "--format", "gguf"}, "no GGUF twin for quant q4g32: GGUF has no block type with MLX's 3-bit affine arithmetic at group 32 (model.embed_tokens)", got{}},
		{"no out", nil, "--out is required", got{}},
		{"bad format", []string{"--out", "x", "--format", "onnx"}, `--format "onnx"`, got{}},
		{"bad preset", []string{"--out", "x", "--preset", "gpt2"}, `--preset "gpt2"`, got{}},
		{"bad quant", []string{"--out", "x", "--quant", "q7"}, "7 bits, want one of", got{}},
		{"bad group", []string{"--out", "x", "--quant", "q4g256"}, "group size 256", got{}},
		{"group conflict", []string{"--out", "x", "--quant", "q4g32", "--group-size", "64"}, "--quant q4g32 has group 32 but --group-size is 64", got{}},
		{"bad dtype", []string{"--out", "x", "--dtype", "f64"}, `--dtype "f64"`, got{}},
		{"dtype conflict", []string{"--out", "x", "--quant", "f16", "--dtype", "bf16"}, "--quant f16 stores f16 weights; --dtype bf16", got{}},
		{"bad shape", []string{"--out", "x", "--hidden", "100"}, "hidden 100 is not a multiple", got{}},
		{"group wider than a row's groups", []string{"--out", "x", "--preset", "smollm2-360m", "--quant", "q4g128"}, "hidden 960 is not a multiple of the group size 128", got{}},
		{"no twin", []string{"--out", "x", "--quant", "q6g64", "--format", "gguf"}, "no GGUF twin for quant q6g64", got{}},
		{"bad gguf q4", []string{"--out", "x", "--gguf-q4", "q4_k"}, `gguf 4-bit type "q4_k"`, got{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _, _, err := parseSynthFlags(c.args, io.Discard)
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("got %v, want an error containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := (got{s.Layers, s.Vocab, s.Group(), s.Quant, s.DType, s.Tied}); g != c.spec {
				t.Errorf("got %+v, want %+v", g, c.spec)
			}
		})
	}
}

// mlxgo synth writes a checkpoint our loader opens and a GGUF our reader
// parses; bad flags exit 2.
func TestCmdSynth(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	mlxDir := filepath.Join(dir, "tiny")
	if code := run([]string{"synth", "--preset", "tiny", "--out", mlxDir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	ck, err := checkpoint.Open(mlxDir)
	if err != nil {
		t.Fatal(err)
	}
	ck.Close()
	g := filepath.Join(dir, "tiny.gguf")
	if code := run([]string{"synth", "--preset", "tiny", "--format", "gguf", "--out", g}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	f, err := gguf.Open(g)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if code := run([]string{"synth", "--preset", "tiny"}, &out, &errb); code != 2 {
		t.Errorf("without --out: exit %d, want 2", code)
	}
	if _, err := os.Stat(filepath.Join(mlxDir, "tokenizer.json")); err != nil {
		t.Errorf("tokenizer.json: %v", err)
	}
	// --format both: the directory and its twin, or the directory and a
	// line saying there is no twin.
	both := filepath.Join(dir, "both")
	out.Reset()
	if code := run([]string{"synth", "--preset", "smollm2-135m", "--layers", "1", "--vocab", "300", "--quant", "q8g64", "--dtype", "f16", "--format", "both", "--out", both}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if f, err := gguf.Open(both + ".gguf"); err != nil {
		t.Errorf("--format both: %v", err)
	} else {
		f.Close()
	}
	out.Reset()
	q3 := filepath.Join(dir, "q3")
	if code := run([]string{"synth", "--preset", "tiny", "--quant", "q3g64", "--format", "both", "--out", q3}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "skipped the GGUF twin: synth: no GGUF twin for quant q3g64") {
		t.Errorf("stdout %q: want the skipped-twin line", out.String())
	}
	if _, err := os.Stat(q3 + ".gguf"); !os.IsNotExist(err) {
		t.Errorf("%s.gguf: stat error %v, want it absent", q3, err)
	}
	if ck, err := checkpoint.Open(q3); err != nil {
		t.Errorf("q3 checkpoint: %v", err)
	} else {
		ck.Close()
	}
}

func TestParseInts(t *testing.T) {
	if got, err := parseInts("128, 512"); err != nil || len(got) != 2 || got[0] != 128 || got[1] != 512 {
		t.Errorf("got %v, %v; want [128 512]", got, err)
	}
	for _, bad := range []string{"", "0", "12,x", "-3"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("parseInts(%q): got no error, want one", bad)
		}
	}
}
