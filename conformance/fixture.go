package conformance

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/tensor"
)

// Case is one fixture: a manifest (see conformance/README.md) and its arrays.
type Case struct {
	Format     int            `json:"format"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"` // "op" or "model"
	Op         string         `json:"op"`
	DType      string         `json:"dtype"`
	Params     map[string]any `json:"params"`
	Inputs     []string       `json:"inputs"`
	Outputs    []string       `json:"outputs"`
	References []string       `json:"references"`
	Tolerance  string         `json:"tolerance"`
	// OutputTolerance overrides Tolerance per output (model cases mix classes).
	OutputTolerance map[string]string `json:"output_tolerance"`
	ArraysFile      string            `json:"arrays"`
	Checkpoint      string            `json:"checkpoint"`
	Oracle          map[string]string `json:"oracle"`

	// Path is the manifest file the case was read from.
	Path string `json:"-"`

	// kvDType is WithKVDType's: the model runners' full caches store
	// float32 keys and values in it (nn.CacheOptions.KVDType).
	kvDType tensor.DType
}

// WithKVDType returns a copy of c whose model runners keep float32 keys and
// values in full caches of dtype dt (nn.CacheOptions.KVDType: bfloat16 or
// float16), the CPU backend's fast precision's cache in mlxgo's commands:
// for a test holding that configuration to the oracle's fixtures, which
// mlx_lm made with float32 caches. A case of another kind of cache then
// fails, naming the option.
func WithKVDType(c *Case, dt tensor.DType) *Case {
	cc := *c
	cc.kvDType = dt
	return &cc
}

// index is manifest.json at the root of a fixture directory.
type index struct {
	Format int               `json:"format"`
	Oracle map[string]string `json:"oracle"`
	Cases  []struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
		File string `json:"file"`
	} `json:"cases"`
}

// Load reads every case listed in dir/manifest.json, in the index's order.
// Every listed file must exist and parse, and name the case the index says.
func Load(dir string) ([]*Case, error) {
	ipath := filepath.Join(dir, "manifest.json")
	data, err := safefile.ReadFile(ipath, safefile.MaxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("conformance: reading fixture index: %w", err)
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("conformance: %s: %w", ipath, err)
	}
	if idx.Format != 1 {
		return nil, fmt.Errorf("conformance: %s: format %d, this build reads format 1", ipath, idx.Format)
	}
	cases := make([]*Case, 0, len(idx.Cases))
	for _, e := range idx.Cases {
		if !filepath.IsLocal(e.File) {
			return nil, fmt.Errorf("conformance: %s: case %q: file %q is not a path inside %s", ipath, e.Name, e.File, dir)
		}
		c, err := LoadCase(filepath.Join(dir, e.File))
		if err != nil {
			return nil, err
		}
		if c.Name != e.Name || c.Kind != e.Kind {
			return nil, fmt.Errorf("conformance: %s lists %q (%s) but %s holds %q (%s)", ipath, e.Name, e.Kind, e.File, c.Name, c.Kind)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// LoadCase reads one case manifest.
func LoadCase(path string) (*Case, error) {
	data, err := safefile.ReadFile(path, safefile.MaxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	c := &Case{Path: path}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("conformance: %s: %w", path, err)
	}
	switch {
	case c.Format != 1:
		return nil, fmt.Errorf("conformance: %s: format %d, this build reads format 1", path, c.Format)
	case c.Name == "":
		return nil, fmt.Errorf("conformance: %s: missing field \"name\"", path)
	case c.Kind != "op" && c.Kind != "model":
		return nil, fmt.Errorf("conformance: %s: kind %q, want \"op\" or \"model\"", path, c.Kind)
	case c.ArraysFile == "":
		return nil, fmt.Errorf("conformance: %s: missing field \"arrays\"", path)
	case !filepath.IsLocal(c.ArraysFile):
		return nil, fmt.Errorf("conformance: %s: arrays %q is not a path inside the case's directory", path, c.ArraysFile)
	case c.Kind == "model" && c.Checkpoint == "":
		return nil, fmt.Errorf("conformance: %s: model case without \"checkpoint\"", path)
	case c.Checkpoint != "" && c.Checkpoint != ".." && !filepath.IsLocal(c.Checkpoint):
		return nil, fmt.Errorf("conformance: %s: checkpoint %q is neither \"..\" (the directory above the case's) nor a path inside the case's directory", path, c.Checkpoint)
	}
	return c, nil
}

// ToleranceOf returns the tolerance class of one output.
func (c *Case) ToleranceOf(output string) string {
	if t, ok := c.OutputTolerance[output]; ok {
		return t
	}
	return c.Tolerance
}

// CheckpointDir is the directory of a model case's checkpoint.
func (c *Case) CheckpointDir() string {
	return filepath.Join(filepath.Dir(c.Path), c.Checkpoint)
}

// Arrays holds a case's arrays, memory-mapped.
type Arrays struct {
	f    *tensor.SafetensorsFile
	name string
}

// OpenArrays maps the case's safetensors file.
func (c *Case) OpenArrays() (*Arrays, error) {
	f, err := tensor.OpenSafetensors(filepath.Join(filepath.Dir(c.Path), c.ArraysFile))
	if err != nil {
		return nil, fmt.Errorf("conformance: case %s: %w", c.Name, err)
	}
	return &Arrays{f: f, name: c.Name}, nil
}

// Input returns input array name (stored as "in.<name>").
func (a *Arrays) Input(name string) (*tensor.Dense, error) { return a.get("in." + name) }

// Output returns the oracle's output array name ("out.<name>").
func (a *Arrays) Output(name string) (*tensor.Dense, error) { return a.get("out." + name) }

// Reference returns the float64 reference of output name ("ref.<name>"), or
// nil when the case has none.
func (a *Arrays) Reference(name string) (*tensor.Dense, error) {
	if _, ok := a.f.Info("ref." + name); !ok {
		return nil, nil
	}
	return a.get("ref." + name)
}

// Has reports whether the arrays file holds a tensor of that full name.
func (a *Arrays) Has(full string) bool { _, ok := a.f.Info(full); return ok }

func (a *Arrays) get(full string) (*tensor.Dense, error) {
	t, err := a.f.Tensor(full)
	if err != nil {
		return nil, fmt.Errorf("conformance: case %s: %w", a.name, err)
	}
	return t, nil
}

// Close unmaps the file.
func (a *Arrays) Close() error { return a.f.Close() }

// Param helpers: manifests are JSON, so numbers arrive as float64.

// Int returns params[key] as an int, or an error naming the case and key.
func (c *Case) Int(key string) (int, error) {
	v, ok := c.Params[key]
	if !ok {
		return 0, fmt.Errorf("case %s: missing param %q", c.Name, key)
	}
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		return 0, fmt.Errorf("case %s: param %q = %v, want an integer", c.Name, key, v)
	}
	return int(f), nil
}

// Float returns params[key] as a float64.
func (c *Case) Float(key string) (float64, error) {
	v, ok := c.Params[key]
	if !ok {
		return 0, fmt.Errorf("case %s: missing param %q", c.Name, key)
	}
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("case %s: param %q = %v, want a number", c.Name, key, v)
	}
	return f, nil
}

// Bool returns params[key] as a bool (false when absent).
func (c *Case) Bool(key string) (bool, error) {
	v, ok := c.Params[key]
	if !ok {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("case %s: param %q = %v, want true or false", c.Name, key, v)
	}
	return b, nil
}

// String returns params[key] as a string ("" when absent or null).
func (c *Case) String(key string) (string, error) {
	v, ok := c.Params[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("case %s: param %q = %v, want a string", c.Name, key, v)
	}
	return s, nil
}

// Has reports whether params has key (and it is not null).
func (c *Case) Has(key string) bool { v, ok := c.Params[key]; return ok && v != nil }

// Filter keeps the cases whose name contains any of the comma-separated
// substrings in pattern ("" keeps all).
func Filter(cases []*Case, pattern string) []*Case {
	if pattern == "" {
		return cases
	}
	var out []*Case
	for _, c := range cases {
		for _, p := range strings.Split(pattern, ",") {
			if p != "" && strings.Contains(c.Name, p) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// Ops lists the distinct ops of the cases, sorted.
func Ops(cases []*Case) []string {
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.Kind+":"+c.Op] = true
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
