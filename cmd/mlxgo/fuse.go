package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/lora"
)

const fuseUsage = `usage: mlxgo fuse --model DIR --adapter-path DIR --save-path DIR [--de-quantize]

Folds LoRA or DoRA adapters (a directory mlx_lm.lora or mlxgo wrote:
adapters.safetensors, adapter_config.json) into the model's weights, as
mlx_lm.fuse does: each adapted layer's weight is dequantized, the update
added, and the result quantized again with the layer's group size and bits;
every other tensor is copied. --de-quantize writes every quantized weight
of the model dequantized and drops the config's quantization. The result
is an MLX model directory (model.safetensors, config.json, the tokenizer
files) that mlx_lm and mlxgo load, with the tensors mlx_lm.fuse writes.

Examples:
  mlxgo fuse --model smollm2-mlx --adapter-path adapters --save-path smollm2-fused
  mlxgo generate --model smollm2-fused --prompt "Hello"

Flags:
`

func cmdFuse(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fuse", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	model := fs.String("model", "", "model directory; required")
	adapters := fs.String("adapter-path", "", "adapter directory (adapters.safetensors, adapter_config.json); required")
	out := fs.String("save-path", "", "directory to write the fused model to (must not exist); required")
	dequantize := fs.Bool("de-quantize", false, "write every quantized weight dequantized (mlx_lm.fuse --dequantize)")
	name := fs.String("backend", defaultBackend(), "backend that computes the fused weights: "+strings.Join(backend.Names(), " or "))
	printUsage, status, done := parseArgs(fs, "fuse", fuseUsage, args, stdout, stderr)
	if done {
		return status
	}
	switch {
	case *model == "" || *adapters == "" || *out == "":
		fmt.Fprint(stderr, "mlxgo fuse: --model, --adapter-path and --save-path are required\n\n")
		printUsage(stderr)
		return 2
	case !slices.Contains(backend.Names(), *name):
		fmt.Fprintf(stderr, "mlxgo fuse: --backend %q is not compiled in (available: %s)\n", *name, strings.Join(backend.Names(), ", "))
		return 2
	}
	b, err := backend.Open(*name, backend.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo fuse: --backend %s: %v\n", *name, err)
		return 2
	}
	defer b.Close()
	res, err := lora.Fuse(b, *model, *adapters, *out, *dequantize)
	PrintWarnings(stderr, res.Warnings)
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo fuse: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "fused %d adapted layers of %s into %s (%d tensors)\n", res.Fused, *model, *out, res.Tensors)
	return 0
}
