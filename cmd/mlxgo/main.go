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
  generate   generate tokens from a model directory
  conform    run the conformance suite against the oracle's fixtures

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
	case "conform":
		return cmdConform(args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "mlxgo: unknown command %q\n\n%s", args[0], usage)
	return 2
}
