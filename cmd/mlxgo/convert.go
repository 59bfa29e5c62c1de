package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/convert"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tokenizer"
)

const convertUsage = `usage: mlxgo convert --gguf FILE --out DIR [--dtype T] [--requantize [--bits N] [--group-size G]]

Converts a llama-architecture GGUF file (llama.cpp's format) into an MLX
model directory: config.json, model.safetensors, tokenizer.json and
tokenizer_config.json with the chat template, all built from the file.

Q4_0, Q4_1 and Q8_0 weights become MLX affine quantization with group 32,
exactly; F32, F16 and BF16 stay as they are; K-quants (Q2_K ... Q6_K) are
dequantized exactly to float32 and kept unquantized, or, with --requantize,
quantized again with MLX's affine algorithm (lossy). llama.cpp's q/k row
permutation is undone, so the model uses Hugging Face's RoPE layout. Any
other tensor type is an error naming the tensor. --dtype saves every
floating-point tensor (norms, unquantized matrices, quantization scales
and biases) as float16, bfloat16 or float32, as mlx_lm convert's --dtype
does: a GGUF keeps its norms in float32, which makes the model compute in
float32 (and keep its KV cache in float32); --dtype float16 gives the
all-float16 model an mlx_lm conversion of a float16 checkpoint would.

Examples:
  mlxgo convert --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out smollm2-mlx
  mlxgo generate --model smollm2-mlx --prompt "What is the capital of France?"
  mlxgo convert --gguf model.Q4_K_M.gguf --out model-mlx --requantize --bits 4 --group-size 64
  mlxgo convert --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out smollm2-f16 --dtype float16

Flags:
`

func cmdConvert(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	src := fs.String("gguf", "", "GGUF file to convert; required")
	out := fs.String("out", "", "output model directory (created if needed); required")
	opts := convert.Options{}
	fs.BoolVar(&opts.Requantize, "requantize", false, "re-quantize dequantized K-quant weights with MLX affine quantization (lossy)")
	fs.IntVar(&opts.Bits, "bits", 4, "bits for --requantize (2, 3, 4, 5, 6 or 8)")
	fs.IntVar(&opts.GroupSize, "group-size", 64, "group size for --requantize (32, 64 or 128)")
	dtype := fs.String("dtype", "", "save every floating-point tensor in this type: float16, bfloat16 or float32 (mlx_lm convert's --dtype); unset: as in the file")
	quiet := fs.Bool("quiet", false, "no progress output")
	printUsage, status, done := parseArgs(fs, "convert", convertUsage, args, stdout, stderr)
	if done {
		return status
	}
	switch {
	case *src == "" || *out == "":
		fmt.Fprint(stderr, "mlxgo convert: --gguf and --out are required\n\n")
		printUsage(stderr)
		return 2
	}
	if *dtype != "" {
		dt, err := tensor.ParseDType(*dtype)
		if err != nil || !slices.Contains(convert.ConvertDTypes, dt) {
			fmt.Fprintf(stderr, "mlxgo convert: --dtype %q: want float16, bfloat16 or float32\n\n", *dtype)
			printUsage(stderr)
			return 2
		}
		opts.DType = dt
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"bits", "group-size"} {
		if set[name] && !opts.Requantize {
			fmt.Fprintf(stderr, "mlxgo convert: --%s applies only with --requantize (the file's own quantization is kept exactly)\n\n", name)
			printUsage(stderr)
			return 2
		}
	}
	if opts.Requantize {
		if !slices.Contains(convert.RequantizeBits, opts.Bits) {
			fmt.Fprintf(stderr, "mlxgo convert: --bits %d: want one of %v\n\n", opts.Bits, convert.RequantizeBits)
			printUsage(stderr)
			return 2
		}
		if !slices.Contains(convert.RequantizeGroupSizes, opts.GroupSize) {
			fmt.Fprintf(stderr, "mlxgo convert: --group-size %d: want one of %v\n\n", opts.GroupSize, convert.RequantizeGroupSizes)
			printUsage(stderr)
			return 2
		}
	}
	start := time.Now()
	last := time.Time{}
	if !*quiet {
		opts.Progress = func(done, total int, name string) {
			if now := time.Now(); done == total || now.Sub(last) > 200*time.Millisecond {
				last = now
				fmt.Fprintf(stderr, "\rconverting %d/%d tensors %-40s", done, total, name)
				if done == total {
					fmt.Fprintln(stderr)
				}
			}
		}
	}
	opts.Check = func(dir string) error { // generate loads the tokenizer too
		_, err := tokenizer.Load(dir)
		return err
	}
	res, err := convert.Convert(*src, *out, opts)
	if err != nil {
		fmt.Fprintln(stderr, "mlxgo convert:", err)
		return 1
	}
	for _, n := range res.Notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	PrintWarnings(stderr, res.Warnings)
	fmt.Fprintf(stdout, "wrote %s (%d tensors; %s) in %.1fs\n", *out, res.Tensors, strings.Join(res.Files, ", "), time.Since(start).Seconds())
	return 0
}

// parseArgs parses args into fs for command name: --help prints usage and
// the flags to stdout (done, status 0); a bad flag or a positional
// argument prints the error, usage and flags to stderr (done, status 2).
// printUsage writes usage and flags to a writer, for the command's own
// later usage errors.
func parseArgs(fs *flag.FlagSet, name, usage string, args []string, stdout, stderr io.Writer) (printUsage func(io.Writer), status int, done bool) {
	printUsage = func(w io.Writer) {
		fmt.Fprint(w, usage)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			printUsage(stdout)
			return printUsage, 0, true
		}
		fmt.Fprintf(stderr, "mlxgo %s: %v\n\n", name, err)
		printUsage(stderr)
		return printUsage, 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mlxgo %s: unexpected argument %q\n\n", name, fs.Arg(0))
		printUsage(stderr)
		return printUsage, 2, true
	}
	return printUsage, 0, false
}
