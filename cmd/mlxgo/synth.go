package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/synth"
)

const synthUsage = `usage: mlxgo synth --out PATH [--preset NAME] [--quant Q] [--format mlx|gguf] [flags]

Writes a seeded synthetic checkpoint with a real model's shapes and random
weights, for benchmarks (weights' values do not change speed). The default
preset, minicpm5-1b, has MiniCPM5-1B's exact shapes; the default quant,
optiq, is the OptiQ-like mix: 8-bit every o_proj and gate_proj, the whole
last block and lm_head, 4-bit group 64 elsewhere (the embedding included).

--format mlx (default) writes the directory PATH as mlx_lm saves a model
(config.json, model.safetensors, model.safetensors.index.json) plus a
word-level tokenizer, so mlx_lm.load and mlxgo both load it. --format gguf
writes the file PATH: the same shapes as GGUF v3 for llama.cpp, Q8_0 where
the MLX checkpoint is 8-bit and Q4_0 where it is 4-bit.

Packed codes and scales are generated directly and streamed to disk, tensor
by tensor; progress goes to stderr.

Examples:
  mlxgo synth --out ~/.cache/mlxgo/synth-minicpm5-1b-optiq
  mlxgo synth --format gguf --out ~/.cache/mlxgo/synth-minicpm5-1b-optiq.gguf
  mlxgo synth --preset tiny --quant q8 --out /tmp/tiny-q8
  mlxgo synth --layers 4 --vocab 32000 --quant q4 --out /tmp/small

Flags:
`

func cmdSynth(args []string, stdout, stderr io.Writer) int {
	s, out, format, err := parseSynthFlags(args, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "mlxgo synth: %v\nRun 'mlxgo synth --help' for usage.\n", err)
		return 2
	}
	start := time.Now()
	if format == "gguf" {
		err = synth.WriteGGUF(out, s, stderr)
	} else {
		err = synth.WriteMLX(out, s, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo synth: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (%s, quant %s, hidden %d, %d layers, vocab %d, seed %d) in %.1fs\n",
		out, format, s.Quant, s.Hidden, s.Layers, s.Vocab, s.Seed, time.Since(start).Seconds())
	return 0
}

// parseSynthFlags returns the spec (the preset with the flags given on top),
// the output path and the format; --help prints the usage to stdout and
// returns flag.ErrHelp.
func parseSynthFlags(args []string, stdout io.Writer) (synth.Spec, string, string, error) {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	preset := fs.String("preset", "minicpm5-1b", "shapes to start from: "+strings.Join(synth.PresetNames(), " or "))
	quant := fs.String("quant", "optiq", "quantization: "+strings.Join(synth.Quants, ", "))
	out := fs.String("out", "", "output directory (mlx) or file (gguf); required")
	format := fs.String("format", "mlx", "mlx or gguf")
	seed := fs.Uint64("seed", 1, "seed of every tensor's values")
	var v synth.Spec
	fs.IntVar(&v.Hidden, "hidden", 0, "hidden_size (overrides the preset)")
	fs.IntVar(&v.Layers, "layers", 0, "num_hidden_layers")
	fs.IntVar(&v.Heads, "heads", 0, "num_attention_heads")
	fs.IntVar(&v.KVHeads, "kv-heads", 0, "num_key_value_heads")
	fs.IntVar(&v.HeadDim, "head-dim", 0, "head_dim")
	fs.IntVar(&v.Intermediate, "intermediate", 0, "intermediate_size")
	fs.IntVar(&v.Vocab, "vocab", 0, "vocab_size")
	fs.IntVar(&v.MaxPositions, "max-positions", 0, "max_position_embeddings")
	fs.IntVar(&v.GroupSize, "group-size", 0, "quantization group size (32, 64 or 128)")
	fs.Float64Var(&v.RopeTheta, "rope-theta", 0, "rope_theta")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, synthUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return synth.Spec{}, "", "", err
	}
	if fs.NArg() > 0 {
		return synth.Spec{}, "", "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	s, ok := synth.Presets[*preset]
	if !ok {
		return synth.Spec{}, "", "", fmt.Errorf("--preset %q: want one of %s", *preset, strings.Join(synth.PresetNames(), ", "))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, o := range []struct {
		name string
		dst  *int
		v    int
	}{{"hidden", &s.Hidden, v.Hidden}, {"layers", &s.Layers, v.Layers}, {"heads", &s.Heads, v.Heads},
		{"kv-heads", &s.KVHeads, v.KVHeads}, {"head-dim", &s.HeadDim, v.HeadDim}, {"intermediate", &s.Intermediate, v.Intermediate},
		{"vocab", &s.Vocab, v.Vocab}, {"max-positions", &s.MaxPositions, v.MaxPositions}, {"group-size", &s.GroupSize, v.GroupSize}} {
		if set[o.name] {
			*o.dst = o.v
		}
	}
	if set["rope-theta"] {
		s.RopeTheta = v.RopeTheta
	}
	s.Quant, s.Seed = *quant, *seed
	if *out == "" {
		return s, "", "", fmt.Errorf("--out is required")
	}
	if *format != "mlx" && *format != "gguf" {
		return s, "", "", fmt.Errorf("--format %q: want mlx or gguf", *format)
	}
	if err := s.Validate(); err != nil {
		return s, "", "", err
	}
	return s, *out, *format, nil
}
