// Command mlxgo runs MLX-format language models (MiniCPM5 first) on the
// backends compiled in, and checks them against the oracle, mlx_lm.
//
// Run with no arguments, it loads the embedded default checkpoint (a tiny
// MiniCPM5-architecture model with an OptiQ-like 4/8-bit mix), generates
// from a fixed prompt, checks the tokens against mlx_lm's, and prints the
// conformance summary for every backend compiled in.
package main

import (
	"fmt"
	"io"
	"os"

	_ "github.com/mlxgo/mlxgo/backend/cpu"
)

const usage = `usage: mlxgo [command] [flags]

Commands:
  (none)     run the embedded default: generate, check against mlx_lm, conformance summary
  generate   generate text (or tokens) from a model directory or Hugging Face repo id
  chat       interactive multi-turn chat with a model, keeping the KV cache between turns
  cache-prompt  run a prompt through a model and save its KV cache (mlx_lm's prompt cache file)
  batch      answer many prompts (a JSON Lines file) at once, decoding them together
  serve      serve the model over HTTP with OpenAI's API (continuous batching)
  loadtest   load-test mlxgo serve (or any OpenAI-compatible server) with many clients
  conform    run the conformance suite against the oracle's fixtures
  convert    convert a llama GGUF file into an MLX model directory
  synth      write a synthetic checkpoint (MiniCPM5-1B shapes, random weights) for benchmarks
  bench      benchmark every backend, mlx_lm and llama.cpp side by side on one checkpoint
  pull       download a Hugging Face Hub model repo into the Hugging Face cache
  diff       compare two backends (or a backend and an oracle tap dump) tap by tap, and bisect kernels
  kvquality  measure KV cache kinds (quantized, TurboQuant) against the full cache: KL, greedy agreement, bytes per token
  fuse       fold LoRA/DoRA adapters into a model's weights (mlx_lm.fuse)
  lora       fine-tune LoRA/DoRA adapters on a data directory, or test them (mlx_lm.lora)

Run 'mlxgo COMMAND --help' for a command's flags and examples.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return cmdDefault(stdout, stderr)
	}
	switch args[0] {
	case "generate":
		return cmdGenerate(args[1:], stdout, stderr)
	case "chat":
		return cmdChat(args[1:], stdout, stderr)
	case "cache-prompt":
		return cmdCachePrompt(args[1:], stdout, stderr)
	case "batch":
		return cmdBatch(args[1:], stdout, stderr)
	case "serve":
		return cmdServe(args[1:], stdout, stderr)
	case "loadtest":
		return cmdLoadtest(args[1:], stdout, stderr)
	case "conform":
		return cmdConform(args[1:], stdout, stderr)
	case "convert":
		return cmdConvert(args[1:], stdout, stderr)
	case "synth":
		return cmdSynth(args[1:], stdout, stderr)
	case "bench":
		return cmdBench(args[1:], stdout, stderr)
	case "diff":
		return cmdDiff(args[1:], stdout, stderr)
	case "pull":
		return cmdPull(args[1:], stdout, stderr)
	case "kvquality":
		return cmdKVQuality(args[1:], stdout, stderr)
	case "fuse":
		return cmdFuse(args[1:], stdout, stderr)
	case "lora":
		return cmdLoRA(args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "mlxgo: unknown command %q\n\n%s", args[0], usage)
	return 2
}
