package debug

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// Side is one side of a comparison: a backend to run, or a dump to read.
type Side struct {
	// File is a tap dump (safetensors); when set, the other fields are unused.
	File string
	// Backend and Precision name a registered backend and its
	// Options.Precision ("" for the default).
	Backend, Precision string
	// Open, when set, opens the backend instead of the registry (tests wrap
	// a backend with a planted fault this way). Backend and Precision still
	// label the side and decide whether two sides are the same implementation.
	Open func() (backend.Backend, error)
	// Name, when set, is the side's label in reports.
	Name string
}

// ParseSide parses "backend", "backend:precision" (e.g. "cpu:high") or a
// path to a dump ("*.safetensors", or any existing file).
func ParseSide(s string) (Side, error) {
	if s == "" {
		return Side{}, fmt.Errorf("empty side: want a backend (%s), backend:precision, or a .safetensors tap dump", strings.Join(backend.Names(), ", "))
	}
	if strings.HasSuffix(s, ".safetensors") {
		return Side{File: s}, nil
	}
	if st, err := os.Stat(s); err == nil && !st.IsDir() {
		return Side{File: s}, nil
	}
	name, prec, _ := strings.Cut(s, ":")
	known := false
	for _, n := range backend.Names() {
		known = known || n == name
	}
	if !known {
		return Side{}, fmt.Errorf("side %q: backend %q is not compiled in (available: %v; the mlx backend needs -tags mlx), and it is not a tap dump file", s, name, backend.Names())
	}
	return Side{Backend: name, Precision: prec}, nil
}

// Label is "backend[:precision]" or the dump file's name.
func (s Side) Label() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.File != "":
		return filepath.Base(s.File)
	case s.Precision == "" || s.Precision == "reference":
		return s.Backend
	}
	return s.Backend + ":" + s.Precision
}

// sameImplementation reports whether two backend sides run the same code
// at the same precision (so must agree bit for bit).
func sameImplementation(a, b Side) bool {
	norm := func(p string) string {
		if p == "" {
			return "reference"
		}
		return p
	}
	return a.File == "" && b.File == "" && a.Backend == b.Backend && norm(a.Precision) == norm(b.Precision)
}

// Engine is a backend with the checkpoint loaded on it.
type Engine struct {
	Label string
	Side  Side
	B     backend.Backend
	M     *minicpm5.Model
}

// OpenEngine opens the side's backend and loads the checkpoint in dir.
func OpenEngine(s Side, dir string) (*Engine, error) {
	if s.File != "" {
		return nil, fmt.Errorf("debug: side %s is a dump, not a backend", s.File)
	}
	var b backend.Backend
	var err error
	if s.Open != nil {
		b, err = s.Open()
	} else {
		b, err = backend.Open(s.Backend, backend.Options{Precision: s.Precision})
	}
	if err != nil {
		return nil, fmt.Errorf("debug: opening %s: %w", s.Label(), err)
	}
	e := &Engine{Label: s.Label(), Side: s, B: b}
	err = b.Do(func() error {
		var err error
		e.M, err = minicpm5.Load(b, dir)
		return err
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("debug: loading %s on %s: %w", dir, s.Label(), err)
	}
	return e, nil
}

// Close closes the model and the backend.
func (e *Engine) Close() {
	e.B.Do(func() error { return e.M.Close() })
	e.B.Close()
}

// Record runs one forward pass of ids (one sequence, no cache, causal mask:
// mlx_lm's model(ids[None])) and records every tap.
func (e *Engine) Record(ids []int32, checkpoint string) (*Dump, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("debug: empty prompt")
	}
	vocab := e.M.Config().VocabSize
	for i, id := range ids {
		if int(id) >= vocab {
			return nil, fmt.Errorf("debug: prompt id %d is %d, want < vocab_size %d", i, id, vocab)
		}
	}
	rec := NewRecorder(e.B)
	err := e.B.Do(func() (err error) {
		defer backend.Recover(&err)
		x := e.B.FromHost(tensor.FromInt32(tensor.Shape{1, len(ids)}, ids))
		defer e.B.Release(x)
		out, err := e.M.Forward(x, nil, minicpm5.ForwardOptions{Tap: rec.Tap})
		if err != nil {
			return err
		}
		e.B.Release(out.Logits)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("debug: forward on %s: %w", e.Label, err)
	}
	prec := e.Side.Precision
	if prec == "" && e.Side.Backend == "cpu" {
		prec = "reference"
	}
	return rec.Dump(Meta{
		Checkpoint: checkpoint, PromptIDs: append([]int32(nil), ids...),
		Backend: e.B.Name(), Precision: prec, DType: e.M.DType().String(), Producer: "mlxgo",
	})
}
