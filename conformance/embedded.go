package conformance

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// defaultCheckpoint is the oracle's optiq-f32 checkpoint with its cases: a
// tiny MiniCPM5-shaped model with an OptiQ-like 4/8-bit mix, float32
// activations. It is built into every binary that imports this package.
//
//go:embed testdata/models/optiq-f32
var defaultCheckpoint embed.FS

const defaultRoot = "testdata/models/optiq-f32"

// DefaultGreedyCase is the greedy/32 case of the default checkpoint: its
// manifest's path relative to the checkpoint directory, and its name.
var DefaultGreedyCase = struct{ Path, Name string }{
	Path: "cases/model__optiq-f32__greedy__32.json",
	Name: "model/optiq-f32/greedy/32",
}

// DefaultCheckpoint writes the embedded default checkpoint (config.json,
// model.safetensors, model.safetensors.index.json and cases/) to a new
// temporary directory and returns it, with a cleanup that removes it.
func DefaultCheckpoint() (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "mlxgo-optiq-f32-")
	if err != nil {
		return "", nil, fmt.Errorf("conformance: extracting the default checkpoint: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	sub, err := fs.Sub(defaultCheckpoint, defaultRoot)
	if err == nil {
		err = os.CopyFS(dir, sub)
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("conformance: extracting the default checkpoint to %s: %w", dir, err)
	}
	return dir, cleanup, nil
}

// CheckpointCases loads every case manifest in dir/cases (the cases of one
// checkpoint directory, which has no manifest.json index), sorted by file
// name.
func CheckpointCases(dir string) ([]*Case, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "cases", "*.json"))
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("conformance: no case manifests (*.json) in %s", filepath.Join(dir, "cases"))
	}
	sort.Strings(paths)
	cases := make([]*Case, 0, len(paths))
	for _, p := range paths {
		c, err := LoadCase(p)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}
