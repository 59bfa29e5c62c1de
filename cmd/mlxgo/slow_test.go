package main

import (
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
)

// reporter is a backend that reports a growing list of slow paths.
type reporter struct {
	backend.Backend
	paths []string
}

func (r *reporter) SlowPaths() []string { return r.paths }
func (r *reporter) Name() string        { return "cpu" }

// TestSlowNotesOnce: each slow path is printed once however often the
// backend reports it, new ones as they appear.
func TestSlowNotesOnce(t *testing.T) {
	r := &reporter{paths: []string{"quantized matmul 3-bit group 32, float16 scales, float32 accumulation"}}
	n := slowNotes{}
	var out strings.Builder
	n.print(r, &out)
	n.print(r, &out)
	r.paths = append(r.paths, "quantized matmul 5-bit group 64, bfloat16 scales, int8 activations")
	n.print(r, &out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (each path once):\n%s", len(lines), out.String())
	}
	for i, p := range r.paths {
		if !strings.HasPrefix(lines[i], "note: "+p+" ran on the cpu backend's portable loops") {
			t.Errorf("line %d: got %q, want the note for %q", i, lines[i], p)
		}
	}
}
