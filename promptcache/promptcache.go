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
// each noted. Its QuantizedKVCache state ([nn.QuantizedKVCache], once
// quantized) is ((codes, scales, biases) of the keys, the same of the
// values, offset, group_size, bits): "i.0.0" to "i.0.2" and "i.1.0" to
// "i.1.2", then the integers "i.2" to "i.4". Other classes hold other
// states: a file naming one is an error naming it.
//
// mlxgo's own class TurboQuantKVCache ([nn.TurboKVCache]; mlx_lm has no
// such cache, so mlx_lm cannot load these files) follows the same scheme:
// its state is ((key codes, key scales, key zero points), (value codes,
// value scales), offset, k_bits, v_bits, deferred): "i.0.0" the key codes
// [B, Hk, capacity, D·k_bits/8] (int8 for 8-bit keys, else uint8, bit-packed
// little-endian), "i.0.1" and "i.0.2" their float16 scales and zero points
// [B, Hk, capacity, D/32], "i.1.0" the value codes [B, Hk, capacity,
// D·v_bits/8] (uint8, packed) and "i.1.1" their float16 scales, then the
// noted integers "i.2" offset, "i.3" k_bits, "i.4" v_bits and "i.5"
// deferred (1: attention reads the values rotated, 0: decoded). The codes
// do not carry the activation dtype: a restored cache decodes to the dtype
// of the first keys appended to it.
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
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// KVCacheClass is mlx_lm's class name of the full KV cache.
const KVCacheClass = "KVCache"

// RotatingKVCacheClass is mlx_lm's class name of the rotating KV cache.
const RotatingKVCacheClass = "RotatingKVCache"

// QuantizedKVCacheClass is mlx_lm's class name of the quantized KV cache.
const QuantizedKVCacheClass = "QuantizedKVCache"

// TurboQuantKVCacheClass is mlxgo's class name of the TurboQuant KV cache
// (see the package doc for its state).
const TurboQuantKVCacheClass = "TurboQuantKVCache"

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
	// _idx (the write index); zero for the other caches.
	Keep, MaxSize, Index int
	// For a quantized cache (QuantizedKVCacheClass) Keys and Values are
	// the packed uint32 codes [B, Hk, capacity, D·Bits/32], these their
	// scales and biases [B, Hk, capacity, D/GroupSize]; nil otherwise.
	KeyScales, KeyBiases, ValueScales, ValueBiases *tensor.Dense
	GroupSize, Bits                                int
	// For a TurboQuant cache (TurboQuantKVCacheClass) Keys are the key
	// codes, KeyScales and KeyBiases the keys' scales and zero points,
	// Values the value codes and ValueScales their scales (ValueBiases
	// nil); Turbo the scheme and TurboDeferred the read.
	Turbo         turboquant.Scheme
	TurboDeferred bool
}

// turbo reports whether l is a TurboQuant cache's state.
func (l *Layer) turbo() bool { return l.Class == TurboQuantKVCacheClass }

// quantized reports whether l is a quantized cache's state.
func (l *Layer) quantized() bool { return l.Class == QuantizedKVCacheClass }

// headDim is the head_dim the layer's keys hold.
func (l *Layer) headDim() int {
	if l.turbo() {
		return l.KeyScales.Shape[3] * turboquant.GroupSize
	}
	if l.quantized() && l.Bits > 0 {
		return l.Keys.Shape[3] * 32 / l.Bits
	}
	return l.Keys.Shape[3]
}

// dtype is the activation dtype the layer holds.
func (l *Layer) dtype() tensor.DType {
	if l.quantized() {
		return l.KeyScales.DType
	}
	return l.Keys.DType
}

// rotating reports whether l is a rotating cache's state.
func (l *Layer) rotating() bool { return l.Class == RotatingKVCacheClass }

// stateLen is the length of the layer's mlx_lm state tuple.
func stateLen(class string) int {
	switch class {
	case RotatingKVCacheClass:
		return 6
	case QuantizedKVCacheClass:
		return 5
	case TurboQuantKVCacheClass:
		return 6
	}
	return 3
}

// intName names the integer at position p (>= 2) of a class's state.
func intName(class string, p int) string {
	names := map[string][]string{
		RotatingKVCacheClass:   {"offset", "keep", "max_size", "_idx"},
		QuantizedKVCacheClass:  {"offset", "group_size", "bits"},
		TurboQuantKVCacheClass: {"offset", "k_bits", "v_bits", "deferred"},
	}[class]
	if names == nil {
		names = []string{"offset"}
	}
	return names[p-2]
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
	// DTypes are the dtypes of each layer's keys and values: the dtype the
	// model computes them in (minicpm5's CacheDTypes).
	DTypes []tensor.DType
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
			case l.headDim() != s.HeadDim:
				return fmt.Errorf("layer %d %s: head_dim %d, the model's is %d", i, a.name, l.headDim(), s.HeadDim)
			case i < len(s.DTypes) && !l.turbo() && l.dtype() != s.DTypes[i]:
				return fmt.Errorf("layer %d %s: dtype %v, the model computes them in %v", i, a.name, l.dtype(), s.DTypes[i])
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
		switch {
		case l.turbo():
			parts := []backend.Array{k, b.FromHost(l.KeyScales), b.FromHost(l.KeyBiases), v, b.FromHost(l.ValueScales)}
			c, err = nn.RestoreTurboKVCache(b, l.Turbo, l.TurboDeferred, parts, l.Offset, tensor.Invalid)
			if err != nil {
				b.Release(parts[1], parts[2], parts[4])
			}
		case l.quantized():
			// k and v are the codes.
			q := func(w backend.Array, s, bi *tensor.Dense) backend.QuantizedArray {
				return backend.QuantizedArray{W: w, Scales: b.FromHost(s), Biases: b.FromHost(bi), GroupSize: l.GroupSize, Bits: l.Bits}
			}
			qk, qv := q(k, l.KeyScales, l.KeyBiases), q(v, l.ValueScales, l.ValueBiases)
			c, err = nn.RestoreQuantizedKVCache(b, qk, qv, l.Offset)
			if err != nil {
				b.Release(qk.Scales, qk.Biases, qv.Scales, qv.Biases)
			}
		case l.rotating():
			c, err = nn.RestoreRotatingKVCache(b, k, v, l.Offset, l.Keep, l.MaxSize, l.Index)
		default:
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
		if c != KVCacheClass && c != RotatingKVCacheClass && c != QuantizedKVCacheClass && c != TurboQuantKVCacheClass {
			return nil, fmt.Errorf("layer %d is a %s; mlxgo reads only mlx_lm's %s, %s and %s, and its own %s", i, c, KVCacheClass, RotatingKVCacheClass, QuantizedKVCacheClass, TurboQuantKVCacheClass)
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
			if (classes[i] == QuantizedKVCacheClass || classes[i] == TurboQuantKVCacheClass) && p < 2 {
				parts := 3
				if classes[i] == TurboQuantKVCacheClass && p == 1 {
					parts = 2
				}
				for part := range parts {
					want[fmt.Sprintf("%d.%d.%d", i, p, part)] = true
				}
				continue
			}
			want[fmt.Sprintf("%d.%d", i, p)] = true
		}
	}
	for _, name := range st.Names() {
		if !want[name] {
			return nil, fmt.Errorf("array %q is not part of a cache state (want <layer>.0 keys, .1 values, .2 offset, and for a RotatingKVCache .3 keep, .4 max_size, .5 _idx, for a QuantizedKVCache .0.0-.0.2 and .1.0-.1.2 the keys' and values' codes, scales and biases, .3 group_size, .4 bits, for a TurboQuantKVCache .0.0-.0.2 the keys' codes, scales and zero points, .1.0-.1.1 the values' codes and scales, .3 k_bits, .4 v_bits, .5 deferred, for layers 0..%d)", name, n-1)
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
		if l.turbo() {
			for j, d := range []**tensor.Dense{&l.Keys, &l.KeyScales, &l.KeyBiases, &l.Values, &l.ValueScales} {
				name := [...]string{"0.0", "0.1", "0.2", "1.0", "1.1"}[j]
				if *d, err = get(name); err != nil {
					return nil, err
				}
			}
		} else if l.quantized() {
			for j, d := range []**tensor.Dense{&l.Keys, &l.KeyScales, &l.KeyBiases, &l.Values, &l.ValueScales, &l.ValueBiases} {
				if *d, err = get(fmt.Sprintf("%d.%d", j/3, j%3)); err != nil {
					return nil, err
				}
			}
		} else {
			if l.Keys, err = get("0"); err != nil {
				return nil, err
			}
			if l.Values, err = get("1"); err != nil {
				return nil, err
			}
		}
		var ints []float64
		for p := 2; p < stateLen(l.Class); p++ {
			name := fmt.Sprintf("%d.%d", i, p)
			x, err := get(strconv.Itoa(p))
			if err != nil {
				return nil, err
			}
			if !noted[name] {
				return nil, fmt.Errorf("layer %d: %s (%s) is not noted as a scalar in the metadata", i, name, intName(l.Class, p))
			}
			if len(x.Shape) != 0 || (x.DType != tensor.I32 && x.DType != tensor.I64) {
				return nil, fmt.Errorf("layer %d: %s %s is %v %v, want a 0-d integer", i, intName(l.Class, p), name, x.DType, x.Shape)
			}
			v := x.ToFloat64()[0]
			if v < 0 || v > 1<<40 {
				return nil, fmt.Errorf("layer %d: %s %s is %v, want a non-negative integer", i, intName(l.Class, p), name, v)
			}
			ints = append(ints, v)
		}
		o := ints[0]
		ks, vs := l.Keys.Shape, l.Values.Shape
		if len(ks) != 4 || len(vs) != 4 || ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] {
			return nil, fmt.Errorf("layer %d: keys %v and values %v, want [B, Hk, capacity, D] with the same B, Hk and capacity", i, ks, vs)
		}
		l.Offset = int(o)
		if l.turbo() {
			l.Turbo, l.TurboDeferred = turboquant.Scheme{KBits: int(ints[1]), VBits: int(ints[2])}, ints[3] != 0
			if err := checkTurbo(&l, ints[3]); err != nil {
				return nil, fmt.Errorf("layer %d: TurboQuantKVCache state: %w", i, err)
			}
			f.Layers = append(f.Layers, l)
			continue
		}
		if l.quantized() {
			l.GroupSize, l.Bits = int(ints[1]), int(ints[2])
			if err := checkQuantized(&l); err != nil {
				return nil, fmt.Errorf("layer %d: QuantizedKVCache state: %w", i, err)
			}
			f.Layers = append(f.Layers, l)
			continue
		}
		if !l.Keys.DType.IsFloat() || l.Keys.DType != l.Values.DType {
			return nil, fmt.Errorf("layer %d: keys %v, values %v, want one float dtype", i, l.Keys.DType, l.Values.DType)
		}
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

// checkTurbo checks a TurboQuant layer's arrays and integers.
func checkTurbo(l *Layer, deferred float64) error {
	if err := l.Turbo.CheckBits(); err != nil {
		return err
	}
	if deferred > 1 {
		return fmt.Errorf("deferred %v, want 0 or 1", deferred)
	}
	w := l.Keys.Shape
	if len(l.KeyScales.Shape) != 4 {
		return fmt.Errorf("key scales %v, want [B, Hk, capacity, D/32]", l.KeyScales.Shape)
	}
	d := l.KeyScales.Shape[3] * turboquant.GroupSize
	if err := turboquant.CheckHeadDim(d); err != nil {
		return err
	}
	keyType := tensor.U8
	if l.Turbo.KBits == 8 {
		keyType = tensor.I8
	}
	for _, p := range []struct {
		name  string
		x     *tensor.Dense
		dt    tensor.DType
		width int
	}{
		{"key codes", l.Keys, keyType, l.Turbo.KeyBytes(d)},
		{"key scales", l.KeyScales, tensor.F16, d / turboquant.GroupSize},
		{"key zero points", l.KeyBiases, tensor.F16, d / turboquant.GroupSize},
		{"value codes", l.Values, tensor.U8, l.Turbo.ValueBytes(d)},
		{"value scales", l.ValueScales, tensor.F16, d / turboquant.GroupSize},
	} {
		want := tensor.Shape{w[0], w[1], w[2], p.width}
		if p.x.DType != p.dt || !p.x.Shape.Equal(want) {
			return fmt.Errorf("%s %v %v, want %v %v (%s, head_dim %d)", p.name, p.x.DType, p.x.Shape, p.dt, want, l.Turbo, d)
		}
	}
	if l.Offset > w[2] {
		return fmt.Errorf("offset %d, want <= capacity %d", l.Offset, w[2])
	}
	return nil
}

// checkQuantized checks a quantized layer's arrays and integers.
func checkQuantized(l *Layer) error {
	if !slices.Contains(nn.KVBits, l.Bits) || !slices.Contains(nn.KVGroupSizes, l.GroupSize) {
		return fmt.Errorf("%d bits in groups of %d: mlxgo offers bits %v and group sizes %v", l.Bits, l.GroupSize, nn.KVBits, nn.KVGroupSizes)
	}
	w := l.Keys.Shape
	for _, x := range []*tensor.Dense{l.Keys, l.Values} {
		if x.DType != tensor.U32 || len(x.Shape) != 4 || !x.Shape.Equal(w) {
			return fmt.Errorf("codes %v %v, want uint32 [B, Hk, capacity, D·bits/32], keys and values alike", x.DType, x.Shape)
		}
	}
	if len(w) != 4 {
		return fmt.Errorf("codes %v, want 4-D", w)
	}
	d := w[3] * 32 / l.Bits
	want := tensor.Shape{w[0], w[1], w[2], d / l.GroupSize}
	for _, x := range []*tensor.Dense{l.KeyScales, l.KeyBiases, l.ValueScales, l.ValueBiases} {
		if !x.DType.IsFloat() || x.DType != l.KeyScales.DType || !x.Shape.Equal(want) {
			return fmt.Errorf("scales or biases %v %v, want %v %v", x.DType, x.Shape, l.KeyScales.DType, want)
		}
	}
	if d%l.GroupSize != 0 || l.Offset > w[2] {
		return fmt.Errorf("head_dim %d, group size %d, offset %d, capacity %d: want head_dim a multiple of the group size and offset <= capacity", d, l.GroupSize, l.Offset, w[2])
	}
	return nil
}

// index parses a non-negative decimal index of a metadata key.
func index(s, key string) (int, error) {
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i > 1<<20 {
		return 0, fmt.Errorf("metadata key %q: %q is not a layer index", key, s)
	}
	return i, nil
}

// FromCaches reads caches (one nn.KVCache per layer, each an
// *nn.FullKVCache, *nn.RotatingKVCache, *nn.QuantizedKVCache or
// *nn.TurboKVCache holding at least one token) back to the host as a File
// with metadata. Call it on b's thread.
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
		case *nn.TurboKVCache:
			st := c.State() // converts the bf16-first window
			if len(st) != 5 {
				return nil, fmt.Errorf("layer %d: the cache is empty; there is nothing to save", i)
			}
			var hs [5]*tensor.Dense
			for j, a := range st {
				h, err := b.ToHost(a)
				if err != nil {
					return nil, fmt.Errorf("layer %d TurboQuant codes: %w", i, err)
				}
				hs[j] = h
			}
			f.Layers = append(f.Layers, Layer{Class: TurboQuantKVCacheClass, Keys: hs[0], KeyScales: hs[1], KeyBiases: hs[2], Values: hs[3], ValueScales: hs[4],
				Offset: c.Offset(), Turbo: c.Scheme(), TurboDeferred: c.Deferred()})
			continue
		case *nn.QuantizedKVCache:
			// Not yet quantized, it is a full KVCache (as in mlx_lm,
			// where the conversion replaces the cache object).
			l.Class = KVCacheClass
			if len(c.State()) == 6 {
				l = Layer{Class: QuantizedKVCacheClass, GroupSize: c.GroupSize(), Bits: c.Bits()}
			}
		default:
			return nil, fmt.Errorf("layer %d: a %T cache; prompt cache files hold mlx_lm's KVCache, RotatingKVCache and QuantizedKVCache only", i, c)
		}
		st := c.State()
		if len(st) == 6 {
			var hs [6]*tensor.Dense
			for j, a := range st {
				h, err := b.ToHost(a)
				if err != nil {
					return nil, fmt.Errorf("layer %d quantized keys and values: %w", i, err)
				}
				hs[j] = h
			}
			l.Keys, l.KeyScales, l.KeyBiases, l.Values, l.ValueScales, l.ValueBiases = hs[0], hs[1], hs[2], hs[3], hs[4], hs[5]
			l.Offset = c.Offset()
			f.Layers = append(f.Layers, l)
			continue
		}
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
// rotating cache also ".3" keep, ".4" max_size, ".5" _idx; a quantized one
// has ".0.0"-".0.2" and ".1.0"-".1.2", the keys' and values' codes, scales
// and biases, for ".0" and ".1", and ".3" group_size, ".4" bits) and the metadata
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
		switch {
		case l.rotating():
			class, ints = RotatingKVCacheClass, []int{l.Offset, l.Keep, l.MaxSize, l.Index}
		case l.quantized():
			class, ints = QuantizedKVCacheClass, []int{l.Offset, l.GroupSize, l.Bits}
		case l.turbo():
			deferred := 0
			if l.TurboDeferred {
				deferred = 1
			}
			class, ints = TurboQuantKVCacheClass, []int{l.Offset, l.Turbo.KBits, l.Turbo.VBits, deferred}
		}
		meta[fmt.Sprintf("1.%d", i)] = class
		if l.turbo() {
			for p, x := range []*tensor.Dense{l.Keys, l.KeyScales, l.KeyBiases, l.Values, l.ValueScales} {
				names = append(names, [...]string{"%d.0.0", "%d.0.1", "%d.0.2", "%d.1.0", "%d.1.1"}[p])
				names[len(names)-1] = fmt.Sprintf(names[len(names)-1], i)
				ts = append(ts, x)
			}
		} else if l.quantized() {
			for p, x := range []*tensor.Dense{l.Keys, l.KeyScales, l.KeyBiases, l.Values, l.ValueScales, l.ValueBiases} {
				names = append(names, fmt.Sprintf("%d.%d.%d", i, p/3, p%3))
				ts = append(ts, x)
			}
		} else {
			names = append(names, fmt.Sprintf("%d.0", i), fmt.Sprintf("%d.1", i))
			ts = append(ts, l.Keys, l.Values)
		}
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
// num_key_value_heads and head_dim, and the dtypes its layers' caches hold
// (minicpm5's CacheDTypes).
func ModelShape(cfg *checkpoint.Config, dtypes []tensor.DType) Shape {
	return Shape{Layers: cfg.NumHiddenLayers, KVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim, DTypes: dtypes}
}
