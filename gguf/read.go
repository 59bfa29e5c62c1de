package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/internal/mmap"
	"github.com/mlxgo/mlxgo/internal/safefile"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// maxDims is GGML_MAX_DIMS; maxArrayDepth bounds nested metadata arrays.
const (
	maxDims       = 4
	maxArrayDepth = 8
)

// Value is one metadata value. V holds, by Type: uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64 or float64; for
// TypeArray, a slice of the element type ([]uint8 ... []string, []bool), or
// []Value when the elements are arrays themselves. Elem is the element type
// of an array.
type Value struct {
	Type ValueType
	Elem ValueType
	V    any
}

// KV is one metadata pair, in file order.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor of the file.
type TensorInfo struct {
	Name string
	// Dims are GGUF's ne, innermost first.
	Dims []uint64
	// Shape is the row-major shape, Dims reversed.
	Shape []int
	Type  Type
	// Offset is the tensor's offset in the data section; Size its bytes.
	Offset, Size uint64
}

// Elements returns the number of elements.
func (t TensorInfo) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is an opened GGUF file: its header, metadata and tensor infos, and
// the memory-mapped bytes. Tensor data stays valid until Close.
type File struct {
	Path      string
	Version   uint32
	Alignment int
	// KVs are the metadata pairs in file order.
	KVs     []KV
	Tensors []TensorInfo
	// DataOffset is where the data section starts in the file.
	DataOffset uint64

	kv     map[string]int
	byName map[string]int
	buf    []byte
	unmap  func([]byte) error
}

// Open reads and checks the header, metadata and tensor infos of path and
// memory-maps it.
func Open(path string) (*File, error) {
	fh, st, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	if st.Size() < 4 {
		return nil, fmt.Errorf("gguf %s: file is %d bytes, too short for the magic %q", path, st.Size(), Magic)
	}
	if st.Size() > math.MaxInt {
		return nil, fmt.Errorf("gguf %s: file of %d bytes is too large", path, st.Size())
	}
	buf, unmap, err := mmap.Map(fh, int(st.Size()))
	if err != nil {
		return nil, fmt.Errorf("gguf %s: mapping: %w", path, err)
	}
	f, err := parse(path, buf)
	if err != nil {
		unmap(buf)
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// Parse reads a GGUF file held in memory; name labels errors. The File
// aliases buf.
func Parse(name string, buf []byte) (*File, error) { return parse(name, buf) }

// Close unmaps the file; tensor data obtained before dies with it.
func (f *File) Close() error {
	if f == nil || f.buf == nil {
		return nil
	}
	var err error
	if f.unmap != nil {
		err = f.unmap(f.buf) // nil for a File from Parse
	}
	f.buf, f.unmap = nil, nil
	if err != nil {
		return fmt.Errorf("gguf %s: unmapping: %w", f.Path, err)
	}
	return nil
}

// reader is a bounds-checked little-endian cursor.
type reader struct {
	path string
	buf  []byte
	off  int
	what string // what is being read, for truncation errors
}

func (r *reader) errf(format string, a ...any) error {
	return fmt.Errorf("gguf %s: "+format, append([]any{r.path}, a...)...)
}

func (r *reader) need(n uint64) ([]byte, error) {
	if n > uint64(len(r.buf)-r.off) {
		return nil, r.errf("truncated: %s needs %d bytes at offset %d, the file has %d", r.what, n, r.off, len(r.buf))
	}
	b := r.buf[r.off : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.need(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.need(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (r *reader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	b, err := r.need(n)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func parse(path string, buf []byte) (*File, error) {
	r := &reader{path: path, buf: buf, what: "the header"}
	if len(buf) < 4 || string(buf[:4]) != Magic {
		n := min(len(buf), 4)
		return nil, r.errf("bad magic %q, want %q (not a GGUF file)", buf[:n], Magic)
	}
	r.off = 4
	f := &File{Path: path, buf: buf, kv: map[string]int{}, byName: map[string]int{}, Alignment: DefaultAlignment}
	var err error
	if f.Version, err = r.u32(); err != nil {
		return nil, err
	}
	switch {
	case f.Version == 1:
		return nil, r.errf("version 1 is not supported (32-bit counts); want version 2 or 3 (re-convert it with a current llama.cpp)")
	case f.Version&0xFFFF == 0 && f.Version != 0:
		return nil, r.errf("version field %#x looks byte-swapped: big-endian GGUF files are not supported", f.Version)
	case f.Version != 2 && f.Version != 3:
		return nil, r.errf("version %d is not supported; want 2 or 3", f.Version)
	}
	nTensors, err := r.u64()
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64()
	if err != nil {
		return nil, err
	}
	// Each pair needs at least 12 bytes (key length, type), each tensor
	// info at least 24 (name length, ndims, type, offset).
	rest := uint64(len(buf) - r.off)
	if nKV > rest/12 {
		return nil, r.errf("header claims %d metadata pairs, more than the %d remaining bytes can hold", nKV, rest)
	}
	if nTensors > rest/24 {
		return nil, r.errf("header claims %d tensors, more than the %d remaining bytes can hold", nTensors, rest)
	}
	f.KVs = make([]KV, 0, nKV)
	for i := uint64(0); i < nKV; i++ {
		r.what = fmt.Sprintf("metadata pair %d's key", i)
		key, err := r.str()
		if err != nil {
			return nil, err
		}
		r.what = fmt.Sprintf("metadata %q", key)
		if _, dup := f.kv[key]; dup {
			return nil, r.errf("metadata key %q appears twice", key)
		}
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		v, err := r.value(ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		f.kv[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{key, v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.V.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, r.errf("metadata general.alignment = %v (%s), want a uint32 power of two", v.V, v.Type)
		}
		f.Alignment = int(a)
	}

	f.Tensors = make([]TensorInfo, 0, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		r.what = fmt.Sprintf("tensor info %d", i)
		ti, err := r.tensorInfo()
		if err != nil {
			return nil, err
		}
		if _, dup := f.byName[ti.Name]; dup {
			return nil, r.errf("tensor %q appears twice", ti.Name)
		}
		f.byName[ti.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}
	a := uint64(f.Alignment)
	f.DataOffset = (uint64(r.off) + a - 1) / a * a
	if f.DataOffset > uint64(len(buf)) && len(f.Tensors) > 0 {
		return nil, r.errf("truncated: the data section would start at %d, past the end of the %d-byte file", f.DataOffset, len(buf))
	}
	dataLen := uint64(0)
	if f.DataOffset < uint64(len(buf)) {
		dataLen = uint64(len(buf)) - f.DataOffset
	}
	for _, ti := range f.Tensors {
		if ti.Offset%a != 0 {
			return nil, r.errf("tensor %s: offset %d is not a multiple of the alignment %d", ti.Name, ti.Offset, a)
		}
		if ti.Offset > dataLen || ti.Size > dataLen-ti.Offset {
			return nil, r.errf("tensor %s: data [%d, %d) of the data section is out of range: the section has %d bytes (file truncated or offsets wrong)", ti.Name, ti.Offset, ti.Offset+ti.Size, dataLen)
		}
	}
	return f, nil
}

func (r *reader) tensorInfo() (TensorInfo, error) {
	var ti TensorInfo
	var err error
	if ti.Name, err = r.str(); err != nil {
		return ti, err
	}
	r.what = "tensor " + ti.Name + "'s info"
	nd, err := r.u32()
	if err != nil {
		return ti, err
	}
	if nd == 0 || nd > maxDims {
		return ti, r.errf("tensor %s: %d dimensions, want 1 to %d", ti.Name, nd, maxDims)
	}
	ti.Dims = make([]uint64, nd)
	n := uint64(1)
	for i := range ti.Dims {
		if ti.Dims[i], err = r.u64(); err != nil {
			return ti, err
		}
		d := ti.Dims[i]
		if d == 0 || d > math.MaxInt32 || n > (1<<50)/d {
			return ti, r.errf("tensor %s: dimensions %v out of range (each must be 1 to 2^31-1, the product at most 2^50)", ti.Name, ti.Dims[:i+1])
		}
		n *= d
	}
	t, err := r.u32()
	if err != nil {
		return ti, err
	}
	ti.Type = Type(t)
	if !ti.Type.Known() {
		return ti, r.errf("tensor %s: unknown ggml type %d (this reader knows F32, F16, BF16, Q4_0 ... Q8_K, the IQ and TQ types and MXFP4)", ti.Name, t)
	}
	if ti.Dims[0]%uint64(ti.Type.BlockSize()) != 0 {
		return ti, r.errf("tensor %s: row length ne[0] = %d is not a multiple of %s's block size %d", ti.Name, ti.Dims[0], ti.Type, ti.Type.BlockSize())
	}
	if ti.Offset, err = r.u64(); err != nil {
		return ti, err
	}
	ti.Size = n / uint64(ti.Type.BlockSize()) * uint64(ti.Type.BlockBytes())
	ti.Shape = make([]int, nd)
	for i, d := range ti.Dims {
		ti.Shape[int(nd)-1-i] = int(d)
	}
	return ti, nil
}

func (r *reader) value(t ValueType, depth int) (Value, error) {
	v := Value{Type: t}
	if t == TypeArray {
		if depth >= maxArrayDepth {
			return v, r.errf("%s: arrays nested deeper than %d", r.what, maxArrayDepth)
		}
		et, err := r.u32()
		if err != nil {
			return v, err
		}
		v.Elem = ValueType(et)
		n, err := r.u64()
		if err != nil {
			return v, err
		}
		minSize := uint64(v.Elem.scalarSize())
		switch v.Elem {
		case TypeString:
			minSize = 8
		case TypeArray:
			minSize = 12
		}
		if minSize == 0 {
			return v, r.errf("%s: unknown array element type %d", r.what, et)
		}
		if n > uint64(len(r.buf)-r.off)/minSize {
			return v, r.errf("truncated: %s is an array of %d %s, more than the %d remaining bytes hold", r.what, n, v.Elem, len(r.buf)-r.off)
		}
		v.V, err = r.array(v.Elem, int(n), depth)
		return v, err
	}
	if t == TypeString {
		s, err := r.str()
		v.V = s
		return v, err
	}
	size := t.scalarSize()
	if size == 0 {
		return v, r.errf("%s: unknown value type %d", r.what, uint32(t))
	}
	b, err := r.need(uint64(size))
	if err != nil {
		return v, err
	}
	v.V, err = scalar(t, b)
	if err != nil {
		return v, r.errf("%s: %v", r.what, err)
	}
	return v, nil
}

func scalar(t ValueType, b []byte) (any, error) {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return b[0], nil
	case TypeInt8:
		return int8(b[0]), nil
	case TypeUint16:
		return le.Uint16(b), nil
	case TypeInt16:
		return int16(le.Uint16(b)), nil
	case TypeUint32:
		return le.Uint32(b), nil
	case TypeInt32:
		return int32(le.Uint32(b)), nil
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case TypeBool:
		if b[0] > 1 {
			return nil, fmt.Errorf("bool byte %d, want 0 or 1", b[0])
		}
		return b[0] == 1, nil
	case TypeUint64:
		return le.Uint64(b), nil
	case TypeInt64:
		return int64(le.Uint64(b)), nil
	case TypeFloat64:
		return math.Float64frombits(le.Uint64(b)), nil
	}
	return nil, fmt.Errorf("not a scalar type: %s", t)
}

func (r *reader) array(et ValueType, n, depth int) (any, error) {
	switch et {
	case TypeString:
		out := make([]string, n)
		for i := range out {
			s, err := r.str()
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case TypeArray:
		out := make([]Value, n)
		for i := range out {
			v, err := r.value(TypeArray, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	size := et.scalarSize()
	b, err := r.need(uint64(n) * uint64(size))
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	switch et {
	case TypeUint8:
		return slices.Clone(b), nil
	case TypeInt8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(b[i])
		}
		return out, nil
	case TypeBool:
		out := make([]bool, n)
		for i := range out {
			if b[i] > 1 {
				return nil, r.errf("%s: element %d: bool byte %d, want 0 or 1", r.what, i, b[i])
			}
			out[i] = b[i] == 1
		}
		return out, nil
	case TypeUint16, TypeInt16:
		u := make([]uint16, n)
		for i := range u {
			u[i] = le.Uint16(b[2*i:])
		}
		if et == TypeUint16 {
			return u, nil
		}
		out := make([]int16, n)
		for i, x := range u {
			out[i] = int16(x)
		}
		return out, nil
	case TypeUint32, TypeInt32, TypeFloat32:
		u := make([]uint32, n)
		for i := range u {
			u[i] = le.Uint32(b[4*i:])
		}
		switch et {
		case TypeUint32:
			return u, nil
		case TypeInt32:
			out := make([]int32, n)
			for i, x := range u {
				out[i] = int32(x)
			}
			return out, nil
		}
		out := make([]float32, n)
		for i, x := range u {
			out[i] = math.Float32frombits(x)
		}
		return out, nil
	default: // 64-bit
		u := make([]uint64, n)
		for i := range u {
			u[i] = le.Uint64(b[8*i:])
		}
		switch et {
		case TypeUint64:
			return u, nil
		case TypeInt64:
			out := make([]int64, n)
			for i, x := range u {
				out[i] = int64(x)
			}
			return out, nil
		}
		out := make([]float64, n)
		for i, x := range u {
			out[i] = math.Float64frombits(x)
		}
		return out, nil
	}
}

// Get returns the metadata value under key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kv[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Data returns the tensor's bytes, a view of the mapped file valid until
// Close.
func (f *File) Data(t TensorInfo) []byte {
	start := f.DataOffset + t.Offset
	return f.buf[start : start+t.Size]
}

func (f *File) keyErr(key, format string, a ...any) error {
	return fmt.Errorf("gguf %s: metadata %s: "+format, append([]any{f.Path, key}, a...)...)
}

// Int returns an integer value of any integer type as an int64; ok is false
// when the key is absent. A value of another type, or a uint64 above
// MaxInt64, is an error.
func (f *File) Int(key string) (int64, bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false, nil
	}
	i, err := asInt(v.V)
	if err != nil {
		return 0, true, f.keyErr(key, "%v", err)
	}
	return i, true, nil
}

func asInt(x any) (int64, error) {
	switch x := x.(type) {
	case uint8:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("%d is out of range", x)
		}
		return int64(x), nil
	}
	return 0, fmt.Errorf("got %T, want an integer", x)
}

// Float returns a float32 or float64 value (or an integer) as a float64.
func (f *File) Float(key string) (float64, bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, false, nil
	}
	switch x := v.V.(type) {
	case float32:
		return float64(x), true, nil
	case float64:
		return x, true, nil
	}
	i, err := asInt(v.V)
	if err != nil {
		return 0, true, f.keyErr(key, "got %s, want a number", v.Type)
	}
	return float64(i), true, nil
}

// String returns a string value.
func (f *File) String(key string) (string, bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return "", false, nil
	}
	s, isStr := v.V.(string)
	if !isStr {
		return "", true, f.keyErr(key, "got %s, want a string", v.Type)
	}
	return s, true, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return false, false, nil
	}
	b, isBool := v.V.(bool)
	if !isBool {
		return false, true, f.keyErr(key, "got %s, want a bool", v.Type)
	}
	return b, true, nil
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, false, nil
	}
	s, isStrs := v.V.([]string)
	if !isStrs {
		return nil, true, f.keyErr(key, "got %s, want an array of strings", describe(v))
	}
	return s, true, nil
}

// Ints returns an array of any integer element type as []int64.
func (f *File) Ints(key string) ([]int64, bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, false, nil
	}
	if v.Type != TypeArray {
		return nil, true, f.keyErr(key, "got %s, want an array of integers", v.Type)
	}
	var out []int64
	var err error
	switch x := v.V.(type) {
	case []uint8:
		out, err = ints(x)
	case []int8:
		out, err = ints(x)
	case []uint16:
		out, err = ints(x)
	case []int16:
		out, err = ints(x)
	case []uint32:
		out, err = ints(x)
	case []int32:
		out, err = ints(x)
	case []uint64:
		out, err = ints(x)
	case []int64:
		out = x
	default:
		return nil, true, f.keyErr(key, "got %s, want an array of integers", describe(v))
	}
	if err != nil {
		return nil, true, f.keyErr(key, "%v", err)
	}
	return out, true, nil
}

func ints[E any](x []E) ([]int64, error) {
	out := make([]int64, len(x))
	for i, e := range x {
		v, err := asInt(any(e))
		if err != nil {
			return nil, fmt.Errorf("element %d: %v", i, err)
		}
		out[i] = v
	}
	return out, nil
}

func describe(v Value) string {
	if v.Type == TypeArray {
		return "array of " + v.Elem.String()
	}
	return v.Type.String()
}

// Summary is a one-line description of a value for listings: scalars in
// full (strings cut at 80 bytes), arrays as their type and length.
func (v Value) Summary() string {
	switch x := v.V.(type) {
	case string:
		if len(x) > 80 {
			x = x[:80] + "..."
		}
		return fmt.Sprintf("%q", x)
	}
	if v.Type == TypeArray {
		n := 0
		switch x := v.V.(type) {
		case []string:
			n = len(x)
		case []Value:
			n = len(x)
		default:
			n = lenOf(x)
		}
		return fmt.Sprintf("[%d x %s]", n, v.Elem)
	}
	return strings.TrimSpace(fmt.Sprint(v.V))
}

func lenOf(x any) int {
	switch x := x.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []bool:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	}
	return 0
}
