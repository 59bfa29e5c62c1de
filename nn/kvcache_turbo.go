package nn

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// TurboKVCache is the TurboQuant KV cache of the graph we port (the seed's
// Bf16FirstTurboQuantKVCache): keys and values encoded by package
// turboquant as they arrive, stored as five arrays [B, Hk, capacity, ·]
// (key codes, key scales, key zero points, packed value codes, value
// scales; the persistence order), capacity growing in steps of KVStep.
//
// The bf16-first composition (mlx_lm's maybe_quantize_kv_cache order, with
// start 0): the first forward pass stores and reads its keys and values in
// the activation dtype through a FullKVCache; the cache converts the whole
// live window when it is next asked for its State, Updated or Trimmed
// (models/minicpm5's Forward asks for State at its end); later tokens are
// encoded on arrival. Conversion is not undone by Trim. NewTurboKVCache
// with fromStart encodes from the first token instead (a different
// composition, for the codec's fixtures).
//
// The codec runs on the host (plain Go, the same on every backend): new
// keys and values are copied to the host and encoded. Update copies the
// stored codes of the live window to the host and decodes them into new
// arrays of the activation dtype. Attention reads either the decoded keys
// and values (eager) or the keys and the values still rotated (Deferred:
// SDPA on rotated values, then the output un-rotated once per query row,
// in float32, and rounded to its dtype); on a backend with
// backend.TurboAttention (CPU) it reads the stored codes in place, a block
// of rows at a time, with the same result bit for bit, else it decodes the
// window on the host first.
type TurboKVCache struct {
	b         backend.Backend
	scheme    turboquant.Scheme
	deferred  bool
	full      *FullKVCache     // the bf16-first phase; nil once converted
	parts     [5]backend.Array // kCodes, kScales, kZeros, vPacked, vScales; nil when empty
	converted bool
	fromStart bool
	offset    int
	dtype     tensor.DType // the activation dtype, of decoded windows
}

var _ KVCache = (*TurboKVCache)(nil)

// NewTurboKVCache returns an empty TurboQuant cache of scheme (which must
// pass CheckBits); deferred selects the deferred read; fromStart skips the
// bf16-first phase.
func NewTurboKVCache(b backend.Backend, scheme turboquant.Scheme, deferred, fromStart bool) (*TurboKVCache, error) {
	if err := scheme.CheckBits(); err != nil {
		return nil, err
	}
	c := &TurboKVCache{b: b, scheme: scheme, deferred: deferred, converted: fromStart, fromStart: fromStart}
	if !fromStart {
		c.full = NewFullKVCache(b)
	}
	return c, nil
}

// Scheme is the cache's TurboQuant scheme.
func (c *TurboKVCache) Scheme() turboquant.Scheme { return c.scheme }

// Deferred reports whether attention reads the values rotated.
func (c *TurboKVCache) Deferred() bool { return c.deferred }

// Converted reports whether the cache holds encoded keys and values (false
// during the bf16-first phase).
func (c *TurboKVCache) Converted() bool { return c.converted }

// Offset returns the number of tokens stored.
func (c *TurboKVCache) Offset() int {
	if !c.converted {
		return c.full.Offset()
	}
	return c.offset
}

// Mask is the full cache's: NoMask for one query, CausalMask otherwise.
func (c *TurboKVCache) Mask(L int) backend.Mask {
	if L == 1 {
		return backend.NoMask{}
	}
	return backend.CausalMask{}
}

// convert encodes the bf16-first window once the full cache holds tokens.
func (c *TurboKVCache) convert() {
	if c.converted || c.full.State() == nil {
		return
	}
	st := c.full.State()
	n := c.full.Offset()
	c.converted = true
	if n > 0 {
		k := c.b.Slice(st[0], zeros4, upTo(st[0].Shape(), n))
		v := c.b.Slice(st[1], zeros4, upTo(st[1].Shape(), n))
		c.append(k, v)
		c.b.Release(k, v)
	}
	c.full.Release()
	c.full = nil
}

// rowBytes are the widths of the five parts for head_dim d.
func (c *TurboKVCache) rowBytes(d int) [5]int {
	g := d / turboquant.GroupSize
	return [5]int{c.scheme.KeyBytes(d), g, g, c.scheme.ValueBytes(d), g}
}

var turboPartTypes = [5]tensor.DType{tensor.U8, tensor.F16, tensor.F16, tensor.U8, tensor.F16}

// partType is the dtype of part i: int8 key codes for signed 8-bit keys.
func (c *TurboKVCache) partType(i int) tensor.DType {
	if i == 0 && c.scheme.KBits == 8 {
		return tensor.I8
	}
	return turboPartTypes[i]
}

// append encodes k and v ([B, Hk, L, D]) and writes them at the offset.
func (c *TurboKVCache) append(k, v backend.Array) {
	s := k.Shape()
	B, H, L, D := s[0], s[1], s[2], s[3]
	if err := turboquant.CheckHeadDim(D); err != nil {
		panic(backend.Errorf("turbo_kv_cache", []backend.Array{k, v}, "%v", err))
	}
	c.dtype = k.DType()
	hk, err := c.b.ToHost(k)
	if err != nil {
		panic(backend.Errorf("turbo_kv_cache", nil, "%v", err))
	}
	hv, err := c.b.ToHost(v)
	if err != nil {
		panic(backend.Errorf("turbo_kv_cache", nil, "%v", err))
	}
	kf, vf := hk.ToFloat32(), hv.ToFloat32()
	w := c.rowBytes(D)
	g := D / turboquant.GroupSize
	rows := B * H * L
	kPacked := make([]byte, rows*w[0])
	kScales := make([]uint16, rows*g)
	kZeros := make([]uint16, rows*g)
	vPacked := make([]byte, rows*w[3])
	vScales := make([]uint16, rows*g)
	codes := make([]byte, D)
	for r := range rows {
		turboquant.EncodeKeys(kf[r*D:(r+1)*D], c.scheme.KBits, codes, kScales[r*g:(r+1)*g], kZeros[r*g:(r+1)*g])
		turboquant.Pack(codes, c.scheme.KBits, kPacked[r*w[0]:(r+1)*w[0]])
		turboquant.EncodeValues(vf[r*D:(r+1)*D], c.scheme.VBits, codes, vScales[r*g:(r+1)*g])
		turboquant.Pack(codes, c.scheme.VBits, vPacked[r*w[3]:(r+1)*w[3]])
	}
	news := [5]*tensor.Dense{
		bytesDense(c.partType(0), tensor.Shape{B, H, L, w[0]}, kPacked),
		halfDense(tensor.Shape{B, H, L, g}, kScales),
		halfDense(tensor.Shape{B, H, L, g}, kZeros),
		bytesDense(tensor.U8, tensor.Shape{B, H, L, w[3]}, vPacked),
		halfDense(tensor.Shape{B, H, L, g}, vScales),
	}
	prev := c.offset
	if c.parts[0] == nil || prev+L > c.parts[0].Shape()[2] {
		n := (KVStep + L - 1) / KVStep * KVStep
		for i := range c.parts {
			z := c.b.Zeros(tensor.Shape{B, H, n, w[i]}, c.partType(i))
			if old := c.parts[i]; old != nil {
				if prev%KVStep != 0 {
					cut := c.b.Slice(old, zeros4, upTo(old.Shape(), prev))
					c.b.Release(old)
					old = cut
				}
				c.parts[i] = c.b.Concatenate(2, old, z)
				c.b.Release(old, z)
			} else {
				c.parts[i] = z
			}
		}
	}
	at := []int{0, 0, prev, 0}
	for i, t := range news {
		a := c.b.FromHost(t)
		old := c.parts[i]
		c.parts[i] = c.b.SliceUpdate(old, a, at)
		c.b.Release(old, a)
	}
	c.offset += L
}

func bytesDense(dt tensor.DType, s tensor.Shape, b []byte) *tensor.Dense {
	t := tensor.New(dt, s)
	copy(t.Data, b)
	return t
}

func halfDense(s tensor.Shape, h []uint16) *tensor.Dense {
	t := tensor.New(tensor.F16, s)
	copy(t.Uint16s(), h)
	return t
}

// TurboWindow is the live window of a TurboKVCache decoded on the host, in
// float32, [B, Hk, Offset, D] each: keys, values, and values still rotated.
type TurboWindow struct {
	Shape                  tensor.Shape
	Keys, Values, VRotated []float32
}

// HostParts copies the five stored parts of the live window to the host
// ([B, Hk, Offset, ·] each, in the persistence order); nil when the cache
// holds no encoded tokens.
func (c *TurboKVCache) HostParts() ([5]*tensor.Dense, error) {
	var out [5]*tensor.Dense
	if !c.converted || c.parts[0] == nil || c.offset == 0 {
		return out, nil
	}
	for i, p := range c.parts {
		sl := c.b.Slice(p, zeros4, upTo(p.Shape(), c.offset))
		t, err := c.b.ToHost(sl)
		c.b.Release(sl)
		if err != nil {
			return out, err
		}
		out[i] = t
	}
	return out, nil
}

// Window decodes the live window on the host: keys always, values
// un-rotated when values is set, rotated when rotated is set.
func (c *TurboKVCache) Window(values, rotated bool) (TurboWindow, error) {
	p, err := c.HostParts()
	if err != nil || p[0] == nil {
		return TurboWindow{}, err
	}
	s := p[0].Shape
	w0, g := s[3], p[1].Shape[3]
	D := g * turboquant.GroupSize
	rows := s[0] * s[1] * s[2]
	win := TurboWindow{Shape: tensor.Shape{s[0], s[1], s[2], D}, Keys: make([]float32, rows*D)}
	if values {
		win.Values = make([]float32, rows*D)
	}
	if rotated {
		win.VRotated = make([]float32, rows*D)
	}
	kp, ks, kz := p[0].Data, p[1].Uint16s(), p[2].Uint16s()
	vp, vs := p[3].Data, p[4].Uint16s()
	w3 := p[3].Shape[3]
	codes := make([]byte, D)
	for r := range rows {
		turboquant.Unpack(kp[r*w0:(r+1)*w0], c.scheme.KBits, codes)
		turboquant.DecodeKeys(codes, c.scheme.KBits, ks[r*g:(r+1)*g], kz[r*g:(r+1)*g], win.Keys[r*D:(r+1)*D])
		if !values && !rotated {
			continue
		}
		turboquant.Unpack(vp[r*w3:(r+1)*w3], c.scheme.VBits, codes)
		if rotated {
			turboquant.DecodeValuesRotated(codes, c.scheme.VBits, vs[r*g:(r+1)*g], win.VRotated[r*D:(r+1)*D])
		}
		if values {
			turboquant.DecodeValues(codes, c.scheme.VBits, vs[r*g:(r+1)*g], win.Values[r*D:(r+1)*D])
		}
	}
	return win, nil
}

// upload makes an array of the activation dtype from float32 host values.
func (c *TurboKVCache) upload(s tensor.Shape, v []float32) backend.Array {
	t := tensor.FromFloat32(s, v)
	if c.dtype != tensor.F32 && c.dtype != tensor.Invalid {
		t = t.Convert(c.dtype)
	}
	return c.b.FromHost(t)
}

// Update appends k and v and returns every stored key and value, decoded
// (the eager read), in the activation dtype.
func (c *TurboKVCache) Update(k, v backend.Array) (backend.Array, backend.Array) {
	c.convert()
	if !c.converted {
		return c.full.Update(k, v)
	}
	c.append(k, v)
	win, err := c.Window(true, false)
	if err != nil {
		panic(backend.Errorf("turbo_kv_cache", nil, "%v", err))
	}
	return c.upload(win.Shape, win.Keys), c.upload(win.Shape, win.Values)
}

// Attend appends k and v and attends q to every stored key: the fused SDPA
// on the full cache during the bf16-first phase, then on the decoded
// window; with the deferred read on the rotated values, the output
// un-rotated per query row. A backend with backend.TurboAttention (the CPU
// backend) reads the stored codes in place instead, a block of rows at a
// time, with the same result bit for bit; others get the window decoded
// on the host.
func (c *TurboKVCache) Attend(q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	c.convert()
	if !c.converted {
		keys, values := c.full.Update(k, v)
		return c.b.ScaledDotProductAttention(q, keys, values, scale, mask)
	}
	if ta, ok := c.b.(backend.TurboAttention); ok {
		c.append(k, v)
		kv := backend.TurboKV{KBits: c.scheme.KBits, VBits: c.scheme.VBits, DType: c.dtype, Rotated: c.deferred}
		for i, p := range c.parts {
			kv.Parts[i] = c.b.Slice(p, zeros4, upTo(p.Shape(), c.offset))
		}
		o := ta.TurboScaledDotProductAttention(q, kv, scale, mask)
		c.b.Release(kv.Parts[:]...)
		if c.deferred {
			return c.unrotate(o)
		}
		return o
	}
	if !c.deferred {
		keys, values := c.Update(k, v)
		return c.b.ScaledDotProductAttention(q, keys, values, scale, mask)
	}
	c.append(k, v)
	win, err := c.Window(false, true)
	if err != nil {
		panic(backend.Errorf("turbo_kv_cache", nil, "%v", err))
	}
	keys, rot := c.upload(win.Shape, win.Keys), c.upload(win.Shape, win.VRotated)
	o := c.b.ScaledDotProductAttention(q, keys, rot, scale, mask)
	c.b.Release(keys, rot)
	return c.unrotate(o)
}

// unrotate applies the inverse value rotation to every row of o (float32 on
// the host) and returns it in o's dtype; o is released.
func (c *TurboKVCache) unrotate(o backend.Array) backend.Array {
	h, err := c.b.ToHost(o)
	if err != nil {
		panic(backend.Errorf("turbo_kv_cache", nil, "%v", err))
	}
	c.b.Release(o)
	dt := h.DType
	f := h.ToFloat32()
	D := h.Shape[len(h.Shape)-1]
	for r := 0; r < len(f); r += D {
		turboquant.Unrotate(f[r : r+D])
	}
	t := tensor.FromFloat32(h.Shape, f)
	if dt != tensor.F32 {
		t = t.Convert(dt)
	}
	return c.b.FromHost(t)
}

// State returns the arrays held: the full cache's buffers during the
// bf16-first phase, then the five encoded parts; nil when empty. It
// converts the cache first when due.
func (c *TurboKVCache) State() []backend.Array {
	c.convert()
	if !c.converted {
		return c.full.State()
	}
	if c.parts[0] == nil {
		return nil
	}
	return c.parts[:]
}

// Trim moves the offset back by up to n tokens and returns how many.
func (c *TurboKVCache) Trim(n int) int {
	c.convert()
	if !c.converted {
		return c.full.Trim(n)
	}
	n = max(0, min(n, c.offset))
	c.offset -= n
	return n
}

// Release frees the buffers and empties the cache (bf16-first again unless
// it was made fromStart).
func (c *TurboKVCache) Release() {
	if c.full != nil {
		c.full.Release()
	}
	c.b.Release(c.parts[:]...)
	c.parts, c.offset, c.full, c.converted = [5]backend.Array{}, 0, nil, c.fromStart
	if !c.fromStart {
		c.full = NewFullKVCache(c.b)
	}
}

// RestoreTurboKVCache returns a converted TurboKVCache holding parts (the
// five arrays [B, Hk, capacity, ·] in the persistence order) whose first
// offset slots are the stored tokens, decoding to dtype. The cache takes
// the arrays over. Parts that do not fit the scheme are an error naming
// them; nothing is released then.
func RestoreTurboKVCache(b backend.Backend, scheme turboquant.Scheme, deferred bool, parts []backend.Array, offset int, dtype tensor.DType) (*TurboKVCache, error) {
	if err := scheme.CheckBits(); err != nil {
		return nil, fmt.Errorf("nn: restoring a TurboQuant KV cache: %w", err)
	}
	if len(parts) != 5 {
		return nil, fmt.Errorf("nn: restoring a TurboQuant KV cache: %d arrays, want 5 (key codes, key scales, key zero points, value codes, value scales)", len(parts))
	}
	c := &TurboKVCache{b: b, scheme: scheme, deferred: deferred, converted: true, offset: offset, dtype: dtype}
	s0 := parts[0].Shape()
	if len(s0) != 4 {
		return nil, fmt.Errorf("nn: restoring a TurboQuant KV cache: key codes %v, want [B, Hk, capacity, D·bits/8]", s0)
	}
	D := s0[3] * 8 / scheme.KBits
	if err := turboquant.CheckHeadDim(D); err != nil || s0[3]*8%scheme.KBits != 0 {
		return nil, fmt.Errorf("nn: restoring a TurboQuant KV cache: key codes of %d bytes per row do not make a supported head_dim at %d bits", s0[3], scheme.KBits)
	}
	w := c.rowBytes(D)
	for i, p := range parts {
		s := p.Shape()
		if len(s) != 4 || s[0] != s0[0] || s[1] != s0[1] || s[2] != s0[2] || s[3] != w[i] || p.DType() != c.partType(i) {
			return nil, fmt.Errorf("nn: restoring a TurboQuant KV cache (%s, head_dim %d): array %d is %v %v, want %v [%d %d %d %d]", scheme, D, i, p.DType(), s, c.partType(i), s0[0], s0[1], s0[2], w[i])
		}
	}
	if offset < 0 || offset > s0[2] {
		return nil, fmt.Errorf("nn: restoring a TurboQuant KV cache: offset %d, want 0 <= offset <= capacity %d", offset, s0[2])
	}
	copy(c.parts[:], parts)
	return c, nil
}

// Fork returns a new cache holding the same tokens without copying them
// (the parts, or the bf16-first full cache, as views: SliceUpdate copies a
// buffer another array still views, so the first write to either cache
// copies it). Release each cache on its own.
func (c *TurboKVCache) Fork() KVCache {
	f := *c
	f.parts = [5]backend.Array{}
	if c.full != nil {
		f.full = c.full.Fork().(*FullKVCache)
	}
	if c.parts[0] != nil {
		for i, p := range c.parts {
			f.parts[i] = c.b.Slice(p, zeros4, p.Shape())
		}
	}
	return &f
}
