// Package promptcache reads and writes prompt cache files in mlx_lm's
// format (mlx_lm/models/cache.py, save_prompt_cache and load_prompt_cache,
// pinned mlx-lm 0.32.2), so that a cache written by mlx_lm.cache_prompt
// runs in mlxgo and one written by mlxgo runs in mlx_lm.
//
// # The format
//
// A safetensors file. Its arrays are the caches' state, flattened the way
// mlx.utils.tree_flatten flattens a list of tuples: for the cache of layer
// i, "i.0" are the keys and "i.1" the values, [B, Hk, capacity, D] in the
// activation dtype, the whole buffer (slots past the offset hold zeros or
// stale data), and "i.2" is the offset, a 0-d int32 array (mlx_lm turns
// Python scalars into arrays and notes which). The "__metadata__" map holds
// three flattened entries: "0.<key>" the user metadata (mlx_lm's
// cache_prompt writes "model" and "tokenizer_config"), "1.<i>" the cache
// class of layer i, and the scalar notes: "2.0" is "" and "2.<j>.0",
// "2.<j>.1" name the j-th scalar array and its kind ("scalar", "string" or
// "none").
//
// mlx_lm 0.32.2's KVCache state is (keys, values, offset). Its
// RotatingKVCache state ([nn.RotatingKVCache]) is (keys, values, offset,
// keep, max_size, _idx): "i.0" and "i.1" the buffers [B, Hk, slots, D] in
// slot order (rotated, not temporal), "i.2" to "i.5" 0-d int32 scalars,
// each noted. Other classes (QuantizedKVCache, ...) hold other states: a
// file naming one is an error naming it.
package promptcache

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// KVCacheClass is mlx_lm's class name of the full KV cache.
const KVCacheClass = "KVCache"

// RotatingKVCacheClass is mlx_lm's class name of the rotating KV cache.
const RotatingKVCacheClass = "RotatingKVCache"

// Layer is one layer's cache state as stored: mlx_lm's KVCache.state, or
// RotatingKVCache.state when Class is RotatingKVCacheClass.
type Layer struct {
	// Class is KVCacheClass (or "", the same) or RotatingKVCacheClass.
	Class        string
	Keys, Values *tensor.Dense // [B, Hk, capacity, D]
	// Offset is the tokens seen: for the full cache the tokens stored in
	// slots [0, Offset).
	Offset int
	// Keep, MaxSize and Index are a rotating cache's keep, max_size and
	// _idx (the write index); zero for the full cache.
	Keep, MaxSize, Index int
}

// rotating reports whether l is a rotating cache's state.
func (l *Layer) rotating() bool { return l.Class == RotatingKVCacheClass }

// stateLen is the length of the layer's mlx_lm state tuple.
func stateLen(class string) int {
	if class == RotatingKVCacheClass {
		return 6
	}
	return 3
}

// File is a prompt cache file's contents.
type File struct {
	Layers []Layer
	// Metadata is the user metadata (mlx_lm's metadata argument).
	Metadata map[string]string
}

// Shape is what a cache must have to fit a model.
type Shape struct {
	Layers, KVHeads, HeadDim int
	DType                    tensor.DType
}

// Check returns an error naming what does not match s: the layer count,
// the batch size (1), kv heads, head_dim or dtype of any layer.
func (f *File) Check(s Shape) error {
	if len(f.Layers) != s.Layers {
		return fmt.Errorf("the prompt cache has %d layers, the model %d", len(f.Layers), s.Layers)
	}
	for i, l := range f.Layers {
		for _, a := range []struct {
			name string
			t    *tensor.Dense
		}{{"keys", l.Keys}, {"values", l.Values}} {
			sh := a.t.Shape
			switch {
			case sh[0] != 1:
				return fmt.Errorf("layer %d %s: batch size %d, want 1 (one sequence)", i, a.name, sh[0])
			case sh[1] != s.KVHeads:
				return fmt.Errorf("layer %d %s: %d kv heads, the model has %d (num_key_value_heads)", i, a.name, sh[1], s.KVHeads)
			case sh[3] != s.HeadDim:
				return fmt.Errorf("layer %d %s: head_dim %d, the model's is %d", i, a.name, sh[3], s.HeadDim)
			case a.t.DType != s.DType:
				return fmt.Errorf("layer %d %s: dtype %v, the model computes in %v", i, a.name, a.t.DType, s.DType)
			}
		}
	}
	if len(f.Layers) > 0 {
		n := f.Layers[0].Offset
		for i, l := range f.Layers {
			if l.Offset != n {
				return fmt.Errorf("layer %d holds %d tokens, layer 0 holds %d", i, l.Offset, n)
			}
		}
	}
	return nil
}

// Tokens is the number of tokens the caches hold (layer 0's offset).
func (f *File) Tokens() int {
	if len(f.Layers) == 0 {
		return 0
	}
	return f.Layers[0].Offset
}

// Caches uploads the layers to b as caches, one per layer (each owns its
// arrays; Release them). Call it on b's thread.
func (f *File) Caches(b backend.Backend) (caches []nn.KVCache, err error) {
	defer backend.Recover(&err)
	defer func() {
		if err != nil {
			for _, c := range caches {
				c.Release()
			}
			caches = nil
		}
	}()
	for i, l := range f.Layers {
		k, v := b.FromHost(l.Keys), b.FromHost(l.Values)
		var c nn.KVCache
		var err error
		if l.rotating() {
			c, err = nn.RestoreRotatingKVCache(b, k, v, l.Offset, l.Keep, l.MaxSize, l.Index)
		} else {
			c, err = nn.RestoreFullKVCache(b, k, v, l.Offset)
		}
		if err != nil {
			b.Release(k, v)
			return caches, fmt.Errorf("layer %d: %w", i, err)
		}
		caches = append(caches, c)
	}
	return caches, nil
}

// Read reads the prompt cache file at path. Every array is copied out of
// the file, which is closed on return.
func Read(path string) (*File, error) {
	st, err := tensor.OpenSafetensors(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	f, err := parse(st)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func parse(st *tensor.SafetensorsFile) (*File, error) {
	meta := st.Metadata()
	if meta == nil {
		return nil, errors.New("no __metadata__: not a prompt cache file (mlx_lm's save_prompt_cache writes the cache classes there)")
	}
	f := &File{Metadata: map[string]string{}}
	classes := map[int]string{}
	scalars := map[int][2]string{}
	for k, v := range meta {
		head, rest, _ := strings.Cut(k, ".")
		switch head {
		case "0":
			f.Metadata[rest] = v
		case "1":
			i, err := index(rest, k)
			if err != nil {
				return nil, err
			}
			classes[i] = v
		case "2":
			if rest == "0" {
				continue
			}
			js, part, _ := strings.Cut(rest, ".")
			j, err := index(js, k)
			if err != nil {
				return nil, err
			}
			n := scalars[j]
			switch part {
			case "0":
				n[0] = v
			case "1":
				n[1] = v
			default:
				return nil, fmt.Errorf("metadata key %q: want 2.<j>.0 or 2.<j>.1", k)
			}
			scalars[j] = n
		default:
			return nil, fmt.Errorf("metadata key %q: not a prompt cache file (mlx_lm's metadata keys are 0.<key>, 1.<layer> and 2.<scalar>)", k)
		}
	}
	if len(classes) == 0 {
		return nil, errors.New("the metadata names no cache classes (1.<layer>): not a prompt cache file")
	}
	n := len(classes)
	for i := range n {
		c, ok := classes[i]
		if !ok {
			return nil, fmt.Errorf("the metadata names cache classes of %d layers but not of layer %d", n, i)
		}
		if c != KVCacheClass && c != RotatingKVCacheClass {
			return nil, fmt.Errorf("layer %d is a %s; mlxgo reads only mlx_lm's %s and %s", i, c, KVCacheClass, RotatingKVCacheClass)
		}
	}
	for _, j := range slices.Sorted(maps.Keys(scalars)) {
		if s := scalars[j]; s[1] != "scalar" {
			return nil, fmt.Errorf("scalar note 2.%d: array %q is a %q, want a cache's integer (\"scalar\")", j, s[0], s[1])
		}
	}
	want := map[string]bool{}
	for i := range n {
		for p := range stateLen(classes[i]) {
			want[fmt.Sprintf("%d.%d", i, p)] = true
		}
	}
	for _, name := range st.Names() {
		if !want[name] {
			return nil, fmt.Errorf("array %q is not part of a cache state (want <layer>.0 keys, .1 values, .2 offset, and for a RotatingKVCache .3 keep, .4 max_size, .5 _idx, for layers 0..%d)", name, n-1)
		}
	}
	noted := map[string]bool{}
	for _, s := range scalars {
		noted[s[0]] = true
	}
	for i := range n {
		get := func(p string) (*tensor.Dense, error) {
			name := fmt.Sprintf("%d.%s", i, p)
			if _, ok := st.Info(name); !ok {
				return nil, fmt.Errorf("layer %d: array %q missing", i, name)
			}
			return st.TensorCopy(name)
		}
		l := Layer{Class: classes[i]}
		var err error
		if l.Keys, err = get("0"); err != nil {
			return nil, err
		}
		if l.Values, err = get("1"); err != nil {
			return nil, err
		}
		var ints []float64
		for p := 2; p < stateLen(l.Class); p++ {
			name := fmt.Sprintf("%d.%d", i, p)
			x, err := get(strconv.Itoa(p))
			if err != nil {
				return nil, err
			}
			if !noted[name] {
				return nil, fmt.Errorf("layer %d: %s (%s) is not noted as a scalar in the metadata", i, name, stateNames[p])
			}
			if len(x.Shape) != 0 || (x.DType != tensor.I32 && x.DType != tensor.I64) {
				return nil, fmt.Errorf("layer %d: %s %s is %v %v, want a 0-d integer", i, stateNames[p], name, x.DType, x.Shape)
			}
			v := x.ToFloat64()[0]
			if v < 0 || v > 1<<40 {
				return nil, fmt.Errorf("layer %d: %s %s is %v, want a non-negative integer", i, stateNames[p], name, v)
			}
			ints = append(ints, v)
		}
		o := ints[0]
		ks, vs := l.Keys.Shape, l.Values.Shape
		if len(ks) != 4 || len(vs) != 4 || ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] {
			return nil, fmt.Errorf("layer %d: keys %v and values %v, want [B, Hk, capacity, D] with the same B, Hk and capacity", i, ks, vs)
		}
		if !l.Keys.DType.IsFloat() || l.Keys.DType != l.Values.DType {
			return nil, fmt.Errorf("layer %d: keys %v, values %v, want one float dtype", i, l.Keys.DType, l.Values.DType)
		}
		l.Offset = int(o)
		if l.rotating() {
			l.Keep, l.MaxSize, l.Index = int(ints[1]), int(ints[2]), int(ints[3])
			if err := nn.CheckRotatingState(ks[2], l.Offset, l.Keep, l.MaxSize, l.Index); err != nil {
				return nil, fmt.Errorf("layer %d: RotatingKVCache state: %w", i, err)
			}
		} else if o > float64(ks[2]) {
			return nil, fmt.Errorf("layer %d: offset %v, want 0 <= offset <= capacity %d", i, o, ks[2])
		}
		f.Layers = append(f.Layers, l)
	}
	return f, nil
}

// stateNames names the integers of the state tuples by position.
var stateNames = map[int]string{2: "offset", 3: "keep", 4: "max_size", 5: "_idx"}

// index parses a non-negative decimal index of a metadata key.
func index(s, key string) (int, error) {
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i > 1<<20 {
		return 0, fmt.Errorf("metadata key %q: %q is not a layer index", key, s)
	}
	return i, nil
}

// FromCaches reads caches (one nn.KVCache per layer, each an
// *nn.FullKVCache or *nn.RotatingKVCache holding at least one token) back
// to the host as a File with metadata. Call it on b's thread.
func FromCaches(b backend.Backend, caches []nn.KVCache, metadata map[string]string) (*File, error) {
	f := &File{Metadata: maps.Clone(metadata)}
	if f.Metadata == nil {
		f.Metadata = map[string]string{}
	}
	for i, c := range caches {
		var l Layer
		switch c := c.(type) {
		case *nn.FullKVCache:
			l.Class = KVCacheClass
		case *nn.RotatingKVCache:
			l = Layer{Class: RotatingKVCacheClass, Keep: c.Keep(), MaxSize: c.MaxSize(), Index: c.Index()}
		default:
			return nil, fmt.Errorf("layer %d: a %T cache; prompt cache files hold mlx_lm's KVCache and RotatingKVCache only", i, c)
		}
		st := c.State()
		if len(st) != 2 {
			return nil, fmt.Errorf("layer %d: the cache is empty; there is nothing to save", i)
		}
		k, err := b.ToHost(st[0])
		if err != nil {
			return nil, fmt.Errorf("layer %d keys: %w", i, err)
		}
		v, err := b.ToHost(st[1])
		if err != nil {
			return nil, fmt.Errorf("layer %d values: %w", i, err)
		}
		l.Keys, l.Values, l.Offset = k, v, c.Offset()
		f.Layers = append(f.Layers, l)
	}
	return f, nil
}

// Write writes f to path as mlx_lm's save_prompt_cache does: the arrays
// "<layer>.0", ".1", ".2" (keys, values, offset as a 0-d int32; for a
// rotating cache also ".3" keep, ".4" max_size, ".5" _idx) and the metadata
// "0.<key>" (user), "1.<layer>" (the class) and the scalar notes.
func (f *File) Write(path string) error {
	if len(f.Layers) == 0 {
		return errors.New("promptcache: no layers to write")
	}
	meta := map[string]string{"2.0": ""}
	for k, v := range f.Metadata {
		meta["0."+k] = v
	}
	var names []string
	var ts []*tensor.Dense
	j := 0
	for i, l := range f.Layers {
		class, ints := KVCacheClass, []int{l.Offset}
		if l.rotating() {
			class, ints = RotatingKVCacheClass, []int{l.Offset, l.Keep, l.MaxSize, l.Index}
		}
		meta[fmt.Sprintf("1.%d", i)] = class
		names = append(names, fmt.Sprintf("%d.0", i), fmt.Sprintf("%d.1", i))
		ts = append(ts, l.Keys, l.Values)
		for p, v := range ints {
			j++
			name := fmt.Sprintf("%d.%d", i, p+2)
			meta[fmt.Sprintf("2.%d.0", j)] = name
			meta[fmt.Sprintf("2.%d.1", j)] = "scalar"
			names = append(names, name)
			ts = append(ts, tensor.FromInt32(tensor.Shape{}, []int32{int32(v)}))
		}
	}
	return tensor.WriteSafetensors(path, names, ts, meta)
}

// ModelShape is the Shape of a model's caches: its config's layer count,
// num_key_value_heads and head_dim, and its activation dtype.
func ModelShape(cfg *checkpoint.Config, dt tensor.DType) Shape {
	return Shape{Layers: cfg.NumHiddenLayers, KVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim, DType: dt}
}
