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
)

func TestParseSynthFlags(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		want  string // error substring; "" for success
		check func(t *testing.T, layers, vocab int, quant string)
	}{
		{"defaults", []string{"--out", "x"}, "", func(t *testing.T, layers, vocab int, quant string) {
			if layers != 24 || vocab != 130560 || quant != "optiq" {
				t.Errorf("got %d layers, vocab %d, quant %s; want minicpm5-1b's 24, 130560, optiq", layers, vocab, quant)
			}
		}},
		{"overrides", []string{"--out", "x", "--layers", "2", "--vocab", "512", "--quant", "q8"}, "", func(t *testing.T, layers, vocab int, quant string) {
			if layers != 2 || vocab != 512 || quant != "q8" {
				t.Errorf("got %d layers, vocab %d, quant %s; want 2, 512, q8", layers, vocab, quant)
			}
		}},
		{"no out", nil, "--out is required", nil},
		{"bad format", []string{"--out", "x", "--format", "onnx"}, `--format "onnx"`, nil},
		{"bad preset", []string{"--out", "x", "--preset", "gpt2"}, `--preset "gpt2"`, nil},
		{"bad quant", []string{"--out", "x", "--quant", "q3"}, `quant "q3"`, nil},
		{"bad shape", []string{"--out", "x", "--hidden", "100"}, "hidden 100 is not a multiple", nil},
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
			c.check(t, s.Layers, s.Vocab, s.Quant)
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
