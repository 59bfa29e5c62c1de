package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/synth"
	"github.com/mlxgo/mlxgo/tensor"
)

const synthUsage = `usage: mlxgo synth --out PATH [--preset NAME] [--quant Q] [--dtype D] [--format mlx|gguf|both] [flags]

Writes a seeded synthetic checkpoint with a real model's shapes and random
weights, for benchmarks (weights' values do not change speed). Presets have
the shapes of the models' published config.json, real vocabulary included
(--vocab and --layers shrink them); each is a plain Llama graph:
  minicpm5-1b     MiniCPM5-1B (default; quant optiq, group 64, untied head)
  smollm2-135m    SmolLM2-135M   (576 wide, 30 layers, vocab 49152, tied)
  smollm2-360m    SmolLM2-360M   (960 wide, 32 layers, vocab 49152, tied)
  smollm2-1.7b    SmolLM2-1.7B   (2048 wide, 24 layers, vocab 49152, tied)
  llama3.2-1b     Llama-3.2-1B   (2048 wide, 16 layers, vocab 128256, tied; no rope_scaling)
  llama3.2-3b     Llama-3.2-3B   (3072 wide, 28 layers, vocab 128256, tied; no rope_scaling)
  qwen2.5-0.5b    Qwen2.5-0.5B's shapes as a Llama (896 wide, 24 layers, vocab
                  151936, tied; without Qwen2's q/k/v biases)
  tiny            the conformance fixtures' shapes, for tests
The real presets default to --quant q4g32; minicpm5-1b and tiny to optiq.

--quant:
  qB, qBgG   every linear and the embedding B-bit affine (B = 2, 3, 4, 5, 6
             or 8), group G (32, 64 or 128; qB takes --group-size or the
             preset's), e.g. q4g32, q8g64, q3g128
             --embed-bits N gives the embedding alone N bits (--quant q4g32
             --embed-bits 8 --dtype f16 --gguf-q4 q4_1 is the layout of the
             real SmolLM2 pair: mlxgo convert of a Q4_1 GGUF, and that GGUF)
  optiq      8-bit every o_proj and gate_proj, the whole last block and
             lm_head, 4-bit elsewhere (the embedding included)
  f16, bf16, f32
             unquantized weights of that dtype (sets --dtype)
--dtype bf16|f16|f32 is the dtype of scales, biases, norms and unquantized
weights, and so of the activations (default bf16). The group size must
divide the hidden size, heads·head-dim and the MLP width, each also a
multiple of 32.

--format mlx (default) writes the directory PATH as mlx_lm saves a model
(config.json, model.safetensors, model.safetensors.index.json) plus a
word-level tokenizer, so mlx_lm.load and mlxgo both load it. --format gguf
writes the file PATH: the GGUF twin for llama.cpp, the same shapes and the
same weights: 4-bit as Q4_0 (--gguf-q4 q4_1 for Q4_1), 5-bit as Q5_0,
8-bit as Q8_0 (each block of 32 takes its group's scale; synth's biases
are -2^(bits-1)·scale, so the values are exact at any group size and the
layout matches at group 32), unquantized as F16, BF16 or F32. 2-, 3- and
6-bit have no twin (GGUF has no block type with that arithmetic: its
K-quants quantize their sub-block scales): --format gguf is then an error. --format both writes PATH and its twin PATH.gguf,
saying so and skipping the twin where there is none.

Packed codes and scales are generated directly and streamed to disk, tensor
by tensor; progress goes to stderr.

Examples:
  mlxgo synth --out ~/.cache/mlxgo/synth-minicpm5-1b-optiq
  mlxgo synth --format gguf --out ~/.cache/mlxgo/synth-minicpm5-1b-optiq.gguf
  mlxgo synth --preset smollm2-135m --quant q4g32 --dtype f16 --format both --out /tmp/smollm2-135m-q4g32-f16
  mlxgo synth --preset smollm2-135m --embed-bits 8 --dtype f16 --gguf-q4 q4_1 --format both --out /tmp/smollm2-135m-like
  mlxgo synth --preset llama3.2-1b --quant q8g64 --format both --out /tmp/llama3.2-1b-q8g64
  mlxgo synth --preset qwen2.5-0.5b --quant bf16 --out /tmp/qwen-bf16
  mlxgo synth --preset tiny --quant q3g64 --out /tmp/tiny-q3
  mlxgo synth --preset smollm2-1.7b --layers 2 --vocab 512 --out /tmp/small

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
	what := fmt.Sprintf("quant %s, dtype %v, hidden %d, %d layers, vocab %d, seed %d", s.Quant, s.DType, s.Hidden, s.Layers, s.Vocab, s.Seed)
	if format != "gguf" {
		if err := synth.WriteMLX(out, s, stderr); err != nil {
			fmt.Fprintf(stderr, "mlxgo synth: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s (mlx, %s) in %.1fs\n", out, what, time.Since(start).Seconds())
	}
	if format == "mlx" {
		return 0
	}
	g := out
	if format == "both" {
		g = out + ".gguf"
		if err := s.GGUFTwin(); errors.Is(err, synth.ErrNoTwin) {
			fmt.Fprintf(stdout, "skipped the GGUF twin: %v\n", err)
			return 0
		}
	}
	start = time.Now()
	if err := synth.WriteGGUF(g, s, stderr); err != nil {
		fmt.Fprintf(stderr, "mlxgo synth: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (gguf twin, %s) in %.1fs\n", g, what, time.Since(start).Seconds())
	return 0
}

// synthDTypes maps --dtype's values to dtypes.
var synthDTypes = map[string]tensor.DType{"bf16": tensor.BF16, "f16": tensor.F16, "f32": tensor.F32}

// parseSynthFlags returns the spec (the preset with the flags given on top),
// the output path and the format; --help prints the usage to stdout and
// returns flag.ErrHelp.
func parseSynthFlags(args []string, stdout io.Writer) (synth.Spec, string, string, error) {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	preset := fs.String("preset", "minicpm5-1b", "shapes to start from: "+strings.Join(synth.PresetNames(), ", "))
	quant := fs.String("quant", "", "quantization: qB or qBgG (B in 2,3,4,5,6,8; G in 32,64,128), optiq, f16, bf16 or f32 (default: the preset's)")
	dtype := fs.String("dtype", "", "dtype of scales, biases, norms, dense weights and activations: bf16, f16 or f32 (default bf16, or --quant's dense dtype)")
	q4 := fs.String("gguf-q4", "q4_0", "GGUF type of the twin's 4-bit weights: q4_0 or q4_1")
	out := fs.String("out", "", "output directory (mlx, both) or file (gguf); required")
	format := fs.String("format", "mlx", "mlx, gguf or both (the directory and PATH.gguf)")
	seed := fs.Uint64("seed", 1, "seed of every tensor's values")
	tied := fs.Bool("tied", false, "tie the output head to the embedding (default: the preset's)")
	var v synth.Spec
	fs.IntVar(&v.Hidden, "hidden", 0, "hidden_size (overrides the preset)")
	fs.IntVar(&v.Layers, "layers", 0, "num_hidden_layers")
	fs.IntVar(&v.Heads, "heads", 0, "num_attention_heads")
	fs.IntVar(&v.KVHeads, "kv-heads", 0, "num_key_value_heads")
	fs.IntVar(&v.HeadDim, "head-dim", 0, "head_dim")
	fs.IntVar(&v.Intermediate, "intermediate", 0, "intermediate_size")
	fs.IntVar(&v.Vocab, "vocab", 0, "vocab_size (default: the preset's real vocabulary)")
	fs.IntVar(&v.MaxPositions, "max-positions", 0, "max_position_embeddings")
	fs.IntVar(&v.EmbedBits, "embed-bits", 0, "bit width of the embedding alone (e.g. 8 with q4g32: the layout of mlxgo convert's SmolLM2 Q4_1 checkpoint)")
	fs.IntVar(&v.GroupSize, "group-size", 0, "quantization group size (32, 64 or 128) for --quant qB and optiq")
	fs.Float64Var(&v.RopeTheta, "rope-theta", 0, "rope_theta")
	fs.Float64Var(&v.RMSNormEps, "rms-norm-eps", 0, "rms_norm_eps")
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
		{"vocab", &s.Vocab, v.Vocab}, {"embed-bits", &s.EmbedBits, v.EmbedBits}, {"max-positions", &s.MaxPositions, v.MaxPositions}, {"group-size", &s.GroupSize, v.GroupSize}} {
		if set[o.name] {
			*o.dst = o.v
		}
	}
	if set["rope-theta"] {
		s.RopeTheta = v.RopeTheta
	}
	if set["rms-norm-eps"] {
		s.RMSNormEps = v.RMSNormEps
	}
	if set["tied"] {
		s.Tied = *tied
	}
	if set["quant"] {
		s.Quant = *quant
	}
	s.Seed, s.Q4Type = *seed, *q4
	// "qBgG" names its group: --group-size may repeat it, not contradict it.
	if _, g, ok := strings.Cut(s.Quant, "g"); ok && strings.HasPrefix(s.Quant, "q") {
		if n, err := strconv.Atoi(g); err == nil {
			if set["group-size"] && v.GroupSize != n {
				return s, "", "", fmt.Errorf("--quant %s has group %d but --group-size is %d", s.Quant, n, v.GroupSize)
			}
			s.GroupSize = n
		}
	}
	dense := map[string]tensor.DType{"f16": tensor.F16, "bf16": tensor.BF16, "f32": tensor.F32}[s.Quant]
	switch dt, ok := synthDTypes[*dtype]; {
	case *dtype != "" && !ok:
		return s, "", "", fmt.Errorf("--dtype %q: want bf16, f16 or f32", *dtype)
	case ok && dense != 0 && dt != dense:
		return s, "", "", fmt.Errorf("--quant %s stores %s weights; --dtype %s contradicts it", s.Quant, s.Quant, *dtype)
	case ok:
		s.DType = dt
	case dense != 0:
		s.DType = dense
	default:
		s.DType = tensor.BF16
	}
	if *out == "" {
		return s, "", "", fmt.Errorf("--out is required")
	}
	if *format != "mlx" && *format != "gguf" && *format != "both" {
		return s, "", "", fmt.Errorf("--format %q: want mlx, gguf or both", *format)
	}
	if err := s.Validate(); err != nil {
		return s, "", "", err
	}
	if *format == "gguf" {
		if err := s.GGUFTwin(); err != nil {
			return s, "", "", err
		}
	}
	return s, *out, *format, nil
}
