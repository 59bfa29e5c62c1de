// Package debug is mlxgo's numerical debugger: it records named
// intermediates ("taps") of a MiniCPM5 forward pass on any backend, compares
// two recordings tap by tap in graph order, and replays one op in isolation
// to tell a faulty kernel from accumulated rounding.
//
// Taps: [TapNames] lists them in graph order ("embed", then per layer i
// "layers.{i}.input_norm", ".q", ".k" (after RoPE), ".v", ".attn" (the SDPA
// output), ".o_proj", ".residual", ".post_norm", ".mlp.gate", ".mlp.up",
// ".mlp.swiglu", ".mlp.down", ".out", then "norm" and "logits"). A
// [Recorder] is an nn.Tap that copies each array to the host as it is made
// (minicpm5.ForwardOptions.Tap); a [Dump] is a set of taps with [Meta], read
// from and written to safetensors (the format is in conformance/README.md,
// section "Tap dumps"; the oracle writes the same with
// conformance/oracle/taps.py).
//
// Comparison: [Compare] gives every tap's max abs, max rel, ULP p50/p99/max
// in the tap's dtype and cosine, checks it against the per-class tolerance
// table ([ToleranceFor]) and names the first tap over it and the ops that
// produce it; [Diff] runs both sides ([Side]: a backend, backend:precision,
// or a dump file) and compares them, and with Options.Op replays an op
// ([Replay]) on every engine and against a plain float64 evaluation.
// [Report] renders as a terminal table, markdown or JSON, and [PlotPNG]
// draws error growth through the layers.
package debug
