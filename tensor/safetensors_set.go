package tensor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mlxgo/mlxgo/internal/safefile"
)

// IndexFileName is the index of a sharded checkpoint, mapping tensor names to shard files.
const IndexFileName = "model.safetensors.index.json"

// SafetensorsSet is a checkpoint stored as one or more safetensors files in a
// directory (model.safetensors, or shards model-00001-of-00002.safetensors, ...).
type SafetensorsSet struct {
	dir   string
	files []*SafetensorsFile // sorted by path
	owner map[string]*SafetensorsFile
	names []string // sorted
}

// OpenSafetensorsDir opens every model*.safetensors file in dir. A tensor name
// held by two files is an error naming both. If dir holds
// model.safetensors.index.json, its weight_map must agree exactly with what
// the shards hold: every mapped name in the named file, every held name
// mapped to its file, every mapped file present; the error lists each
// disagreement.
func OpenSafetensorsDir(dir string) (*SafetensorsSet, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("safetensors dir %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("safetensors dir %s: no model*.safetensors files", dir)
	}
	sort.Strings(paths)
	s := &SafetensorsSet{dir: dir, owner: map[string]*SafetensorsFile{}}
	for _, p := range paths {
		f, err := OpenSafetensors(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		for _, name := range f.Names() {
			if other, dup := s.owner[name]; dup {
				s.Close()
				return nil, fmt.Errorf("safetensors dir %s: tensor %q is in both %s and %s", dir, name, other.Path(), p)
			}
			s.owner[name] = f
			s.names = append(s.names, name)
		}
	}
	sort.Strings(s.names)
	if err := s.checkIndex(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// checkIndex cross-checks the index file, if any, against the shards.
func (s *SafetensorsSet) checkIndex() error {
	ipath := filepath.Join(s.dir, IndexFileName)
	raw, err := safefile.ReadFile(ipath, safefile.MaxJSONBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("safetensors index %s: %w", ipath, err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("safetensors index %s: invalid JSON: %v", ipath, err)
	}
	if idx.WeightMap == nil {
		return fmt.Errorf("safetensors index %s: no \"weight_map\" object", ipath)
	}
	var problems []string
	mapped := make([]string, 0, len(idx.WeightMap))
	for name := range idx.WeightMap {
		mapped = append(mapped, name)
	}
	sort.Strings(mapped)
	for _, name := range mapped {
		file := idx.WeightMap[name]
		owner, ok := s.owner[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("tensor %q is mapped to %s but no shard holds it", name, file))
		case filepath.Base(owner.Path()) != file:
			problems = append(problems, fmt.Sprintf("tensor %q is mapped to %s but is in %s", name, file, owner.Path()))
		}
	}
	for _, name := range s.names {
		if _, ok := idx.WeightMap[name]; !ok {
			problems = append(problems, fmt.Sprintf("tensor %q in %s is missing from the weight_map", name, s.owner[name].Path()))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	const show = 10
	msg := strings.Join(problems[:min(show, len(problems))], "; ")
	if len(problems) > show {
		msg += fmt.Sprintf("; and %d more", len(problems)-show)
	}
	return fmt.Errorf("safetensors index %s disagrees with the shards: %s", ipath, msg)
}

// Names returns every tensor name in the set, sorted.
func (s *SafetensorsSet) Names() []string { return append([]string(nil), s.names...) }

// Files returns the paths of the set's files, sorted.
func (s *SafetensorsSet) Files() []string {
	out := make([]string, len(s.files))
	for i, f := range s.files {
		out[i] = f.Path()
	}
	return out
}

// Info returns the named tensor's description and the path of the file holding it.
func (s *SafetensorsSet) Info(name string) (TensorInfo, string, bool) {
	f, ok := s.owner[name]
	if !ok {
		return TensorInfo{}, "", false
	}
	in, _ := f.Info(name)
	return in, f.Path(), true
}

// Tensor returns the named tensor from the file holding it, with the same
// view-or-copy rule as SafetensorsFile.Tensor.
func (s *SafetensorsSet) Tensor(name string) (*Dense, error) {
	f, ok := s.owner[name]
	if !ok {
		return nil, fmt.Errorf("safetensors dir %s: no tensor %q in %s", s.dir, name, strings.Join(s.Files(), ", "))
	}
	return f.Tensor(name)
}

// Close closes every file, returning the first error.
func (s *SafetensorsSet) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
