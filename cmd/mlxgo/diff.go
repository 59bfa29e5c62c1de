package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/debug"
)

const diffUsage = `usage: mlxgo diff [flags]

Runs one forward pass on two sides and compares their taps (named
intermediates: embed, layers.{i}.input_norm, .q, .k, .v, .attn, .o_proj,
.residual, .post_norm, .mlp.gate, .mlp.up, .mlp.swiglu, .mlp.down, .out,
norm, logits) in graph order: max abs, max rel, ULP p50/p99/max in the tap's
dtype, cosine; marks the first tap over its tolerance and lists its worst
elements. A side is a backend ("cpu", "mlx"), backend:precision ("cpu:high")
or a tap dump (.safetensors, e.g. written by conformance/oracle/taps.py).
Exit status 0 when every tap is within tolerance, 1 when one is not.

With no flags it compares the CPU backend with mlx_lm's own taps on the
embedded default checkpoint (optiq-f32).

Examples:
  mlxgo diff
  mlxgo diff --model conformance/testdata/models/q4g64-bf16 --a cpu --b mlx
  mlxgo diff --a cpu --b cpu:high --op layers.1.rope
  mlxgo diff --model DIR --prompt-ids 1,2,3 --b taps.safetensors --format markdown --plot growth.png

Flags:
`

// cmdDiff is `mlxgo diff`.
func cmdDiff(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", "checkpoint directory (default: the embedded optiq-f32 checkpoint)")
	ids := fs.String("prompt-ids", "", "comma-separated token ids (default: the prompt of a dump side, or of the checkpoint's taps.safetensors)")
	a := fs.String("a", "cpu", "side A: backend, backend:precision, or a tap dump file")
	b := fs.String("b", "", "side B, the reference (default: the checkpoint's oracle dump, DIR/taps.safetensors)")
	op := fs.String("op", "first", `replay in isolation: a tap (layers.1.mlp.swiglu), layers.{i}.{op} (layers.0.rope), an op class at the first failing layer (rope, sdpa, linear, rms_norm, swiglu, add, embedding), "first" (the first failing tap, if any) or "none"`)
	format := fs.String("format", "text", "output: text, markdown or json")
	plot := fs.String("plot", "", "write a PNG of error growth through the layers to this file")
	worst := fs.Int("worst", 5, "worst elements kept per tap")
	exact := fs.String("exact", "auto", "bit-exact regime: auto (when A and B are the same backend and precision), on or off")
	saveA := fs.String("save-a", "", "write side A's taps to this .safetensors file")
	saveB := fs.String("save-b", "", "write side B's taps to this .safetensors file")
	fs.Usage = func() {
		fmt.Fprint(stderr, diffUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mlxgo diff: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *worst < 1 { // debug.Options takes 0 for its default, so 0 would silently keep 5
		fmt.Fprintf(stderr, "mlxgo diff: --worst %d, want >= 1\n", *worst)
		return 2
	}
	switch *format {
	case "text", "markdown", "json":
	default:
		fmt.Fprintf(stderr, "mlxgo diff: --format %q, want text, markdown or json\n", *format)
		return 2
	}
	switch *exact {
	case "auto", "on", "off":
	default: // checked here, not after both forward passes
		fmt.Fprintf(stderr, "mlxgo diff: --exact %q, want auto, on or off\n", *exact)
		return 2
	}
	o := debug.Options{Model: *model, Op: *op, Worst: *worst, Exact: *exact, SaveA: *saveA, SaveB: *saveB}
	if o.Op == "none" {
		o.Op = ""
	}
	if *ids != "" {
		v, err := debug.ParseIDs(*ids)
		if err != nil {
			fmt.Fprintf(stderr, "mlxgo diff: --prompt-ids: %v\n", err)
			return 2
		}
		o.PromptIDs = v
	}
	if o.Model == "" {
		dir, cleanup, err := conformance.DefaultCheckpoint()
		if err != nil {
			fmt.Fprintln(stderr, "mlxgo diff:", err)
			return 1
		}
		defer cleanup()
		o.Model, o.Name = dir, "optiq-f32 (embedded)"
	}
	if *b == "" {
		*b = filepath.Join(o.Model, debug.TapsFile)
	}
	var err error
	if o.A, err = debug.ParseSide(*a); err != nil {
		fmt.Fprintf(stderr, "mlxgo diff: --a: %v\n", err)
		return 2
	}
	if o.B, err = debug.ParseSide(*b); err != nil {
		fmt.Fprintf(stderr, "mlxgo diff: --b: %v\n", err)
		return 2
	}
	r, err := debug.Diff(o)
	if err != nil {
		fmt.Fprintln(stderr, "mlxgo diff:", err)
		return 1
	}
	PrintWarnings(stderr, r.Warnings)
	switch *format {
	case "json":
		err = r.WriteJSON(stdout)
	case "markdown":
		r.WriteMarkdown(stdout)
	default:
		r.WriteText(stdout)
	}
	if err == nil && *plot != "" {
		err = debug.PlotPNG(r, *plot)
		if err == nil && *format != "json" {
			fmt.Fprintf(stdout, "plot: %s\n", *plot)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "mlxgo diff:", err)
		return 1
	}
	if !r.Pass() {
		return 1
	}
	return 0
}
