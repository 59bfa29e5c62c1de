package debug

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
)

// TapsFile is the name of the oracle's tap dump inside a fixture checkpoint
// directory (conformance/testdata/models/<ckpt>/taps.safetensors).
const TapsFile = "taps.safetensors"

// Options configure Diff.
type Options struct {
	// Model is the checkpoint directory.
	Model string
	// Name labels the checkpoint in reports (default: Model's base name).
	Name string
	// PromptIDs is the input, one sequence. nil: the prompt of a dump side,
	// or of Model/taps.safetensors.
	PromptIDs []int32
	// A and B are the sides; B is the reference of the relative metrics.
	A, B Side
	// Exact forces ("on") or forbids ("off") the bit-exact regime; "" or
	// "auto" uses it when A and B are the same backend at the same precision.
	Exact string
	// Worst is how many worst elements to keep per tap (default 5).
	Worst int
	// Op, when set, replays ops in isolation (see ResolveOp): "first" replays
	// the first failing tap, if any.
	Op string
	// SaveA and SaveB, when set, write side A's or B's taps to a dump file.
	SaveA, SaveB string
	// Engines run the replay besides the sides' own backends. nil means
	// cpu:high plus every registered backend (default precision) that is not
	// already a side.
	Engines []Side
}

// Diff runs (or reads) both sides on the same input and compares their taps.
// With Op it also replays ops in isolation (Report.Replays).
func Diff(o Options) (*Report, error) {
	if o.Model == "" {
		return nil, fmt.Errorf("debug: no checkpoint directory")
	}
	ids, err := promptIDs(o)
	if err != nil {
		return nil, err
	}
	name := o.Name
	if name == "" {
		name = filepath.Base(filepath.Clean(o.Model))
	}
	var opened []*Engine
	defer func() {
		for _, e := range opened {
			e.Close()
		}
	}()
	side := func(s Side) (*Dump, *Engine, error) {
		if s.File != "" {
			d, err := ReadDump(s.File)
			return d, nil, err
		}
		e, err := OpenEngine(s, o.Model)
		if err != nil {
			return nil, nil, err
		}
		opened = append(opened, e)
		d, err := e.Record(ids, name)
		return d, e, err
	}
	da, ea, err := side(o.A)
	if err != nil {
		return nil, err
	}
	db, eb, err := side(o.B)
	if err != nil {
		return nil, err
	}
	for _, w := range []struct {
		path string
		d    *Dump
	}{{o.SaveA, da}, {o.SaveB, db}} {
		if w.path != "" {
			if err := w.d.Write(w.path); err != nil {
				return nil, err
			}
		}
	}
	if ea != nil && eb != nil && ea.Label == eb.Label {
		ea.Label, eb.Label = ea.Label+" (A)", eb.Label+" (B)"
	}
	exact := sameImplementation(o.A, o.B)
	switch o.Exact {
	case "on":
		exact = true
	case "off":
		exact = false
	case "", "auto":
	default:
		return nil, fmt.Errorf("debug: Exact %q, want on, off or auto", o.Exact)
	}
	r := Compare(da, db, CompareOptions{Exact: exact, Worst: o.Worst})
	r.Checkpoint, r.PromptIDs = name, ids
	r.ALabel, r.BLabel = sideLabel(o.A, da), sideLabel(o.B, db)
	if ea != nil {
		r.ALabel = ea.Label
	}
	if eb != nil {
		r.BLabel = eb.Label
	}
	for _, e := range opened {
		r.Warnings = append(r.Warnings, e.M.Warnings()...)
	}
	if o.Op == "" {
		return r, nil
	}

	ck, err := checkpoint.Open(o.Model)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	taps, err := ResolveOp(o.Op, r, len(ck.Layers))
	if err != nil || len(taps) == 0 {
		return r, err
	}
	engines := []*Engine{}
	for _, e := range []*Engine{ea, eb} {
		if e != nil {
			engines = append(engines, e)
		}
	}
	extra := o.Engines
	if extra == nil {
		extra = defaultEngines(o.A, o.B)
	}
	for _, s := range extra {
		e, err := OpenEngine(s, o.Model)
		if err != nil {
			return nil, err
		}
		opened = append(opened, e)
		engines = append(engines, e)
	}
	for _, t := range taps {
		rp, err := ReplayTap(t, da, ck, engines, ea, eb, exact)
		if err != nil {
			return nil, err
		}
		r.Replays = append(r.Replays, rp)
	}
	return r, nil
}

func sideLabel(s Side, d *Dump) string {
	if s.File != "" {
		return filepath.Base(s.File) + " (" + d.Meta.Label() + ")"
	}
	return s.Label()
}

// defaultEngines is cpu:high plus every registered backend not already a side.
func defaultEngines(a, b Side) []Side {
	var out []Side
	has := func(s Side) bool { return sameImplementation(s, a) || sameImplementation(s, b) }
	for _, n := range backend.Names() {
		if s := (Side{Backend: n}); !has(s) {
			out = append(out, s)
		}
	}
	if s := (Side{Backend: "cpu", Precision: "high"}); slices.Contains(backend.Names(), "cpu") && !has(s) {
		out = append(out, s)
	}
	return out
}

// promptIDs picks the input: the option, else a dump side's, else the
// checkpoint's own oracle dump's. Dump sides must agree with it.
func promptIDs(o Options) ([]int32, error) {
	ids := o.PromptIDs
	from := "--prompt-ids"
	for _, s := range []Side{o.A, o.B} {
		if s.File == "" {
			continue
		}
		d, err := ReadDump(s.File)
		if err != nil {
			return nil, err
		}
		if ids == nil {
			ids, from = d.Meta.PromptIDs, s.File
		} else if !slices.Equal(ids, d.Meta.PromptIDs) {
			return nil, fmt.Errorf("debug: %s was recorded for prompt %v, but %s gives %v", s.File, d.Meta.PromptIDs, from, ids)
		}
	}
	if ids != nil {
		return ids, nil
	}
	p := filepath.Join(o.Model, TapsFile)
	if _, err := os.Stat(p); err != nil {
		return nil, fmt.Errorf("debug: no prompt: give prompt ids, or a checkpoint with an oracle dump %s", p)
	}
	d, err := ReadDump(p)
	if err != nil {
		return nil, err
	}
	return d.Meta.PromptIDs, nil
}
