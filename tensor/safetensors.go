package tensor

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unsafe"

	"github.com/mlxgo/mlxgo/internal/atomicfile"
	"github.com/mlxgo/mlxgo/internal/mmap"
	"github.com/mlxgo/mlxgo/internal/safefile"
)

// MaxHeaderLen bounds a safetensors JSON header, as the Rust safetensors crate
// and MLX do (100,000,000 bytes): a larger length means a corrupt file.
const MaxHeaderLen = 100_000_000

// TensorInfo describes one tensor of a safetensors file. Begin and End are
// byte offsets relative to the start of the data area (just after the header).
type TensorInfo struct {
	Name  string
	DType DType
	Shape Shape
	Begin int64
	End   int64
	// HeaderDType is the dtype name as the header spells it. It differs from
	// DType.String() only for the 8-bit float names F8_E4M3 and F8_E8M0,
	// which are read as U8 (raw bytes), as MLX does.
	HeaderDType string
}

// SafetensorsFile is an open safetensors file, memory-mapped read-only.
//
// The reader is strict, like the reference implementation: the header must be
// a JSON object whose entries (other than "__metadata__", an object of strings
// or null) are objects with a known "dtype", a "shape" of non-negative
// integers and "data_offsets" [begin, end] with 0 <= begin <= end <= data
// length and end-begin = shape product × dtype size. The tensors must tile the
// data area exactly: no overlaps, and no holes or trailing bytes (the
// safetensors format forbids holes and MLX never writes any; an unreferenced
// gap means the header does not describe the file). Offsets need not be
// aligned (MLX does not pad its header).
type SafetensorsFile struct {
	path      string
	mapped    []byte // whole file
	unmap     func([]byte) error
	dataStart int64
	infos     []TensorInfo // sorted by Begin (file order)
	index     map[string]int
	meta      map[string]string
}

// fileErr formats an error about the whole file.
func fileErr(path, format string, args ...any) error {
	return fmt.Errorf("safetensors %s: %s", path, fmt.Sprintf(format, args...))
}

// tensorErr formats an error about one tensor of the file.
func tensorErr(path, name, format string, args ...any) error {
	return fmt.Errorf("safetensors %s: tensor %q: %s", path, name, fmt.Sprintf(format, args...))
}

// OpenSafetensors opens and validates the safetensors file at path, mapping it
// into memory. Every problem is reported as an error naming the file and,
// where there is one, the tensor.
func OpenSafetensors(path string) (*SafetensorsFile, error) {
	f, st, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	size := st.Size()
	if size < 8 {
		return nil, fileErr(path, "file is %d bytes, shorter than the 8-byte header length", size)
	}
	if size > math.MaxInt {
		return nil, fileErr(path, "file of %d bytes is too large to map", size)
	}
	mapped, unmap, err := mmap.Map(f, int(size))
	if err != nil {
		return nil, fileErr(path, "mapping file: %v", err)
	}
	sf := &SafetensorsFile{path: path, mapped: mapped, unmap: unmap}
	if err := sf.parse(); err != nil {
		unmap(mapped)
		return nil, err
	}
	return sf, nil
}

func (f *SafetensorsFile) parse() error {
	size := int64(len(f.mapped))
	n := binary.LittleEndian.Uint64(f.mapped[:8])
	if n > MaxHeaderLen {
		return fileErr(f.path, "header length %d exceeds the limit of %d bytes", n, MaxHeaderLen)
	}
	if int64(n) > size-8 {
		return fileErr(f.path, "header length %d runs past the end of the %d-byte file", n, size)
	}
	f.dataStart = 8 + int64(n)
	dataLen := size - f.dataStart
	infos, meta, err := parseHeader(f.path, f.mapped[8:f.dataStart], dataLen)
	if err != nil {
		return err
	}
	f.infos, f.meta = infos, meta
	f.index = make(map[string]int, len(infos))
	for i, in := range infos {
		f.index[in.Name] = i
	}
	return nil
}

// headerDTypes maps the dtype names accepted in a header.
var headerDTypes = func() map[string]DType {
	m := map[string]DType{"F8_E4M3": U8, "F8_E8M0": U8}
	for d := Bool; d <= F64; d++ {
		m[d.String()] = d
	}
	return m
}()

// parseHeader decodes and validates a header against a data area of dataLen bytes.
func parseHeader(path string, hdr []byte, dataLen int64) ([]TensorInfo, map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fileErr(path, "header is not valid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fileErr(path, "header is not a JSON object (starts with %v)", tok)
	}
	var infos []TensorInfo
	var meta map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fileErr(path, "header is not valid JSON: %v", err)
		}
		name := tok.(string) // object keys are always strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, tensorErr(path, name, "header is not valid JSON: %v", err)
		}
		if seen[name] {
			return nil, nil, tensorErr(path, name, "appears twice in the header")
		}
		seen[name] = true
		if name == "__metadata__" {
			if meta, err = parseMetadata(raw); err != nil {
				return nil, nil, fileErr(path, "__metadata__: %v", err)
			}
			continue
		}
		info, err := parseEntry(name, raw, dataLen)
		if err != nil {
			return nil, nil, tensorErr(path, name, "%v", err)
		}
		infos = append(infos, info)
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, nil, fileErr(path, "header is not valid JSON: %v", err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		return nil, nil, fileErr(path, "header has data after its JSON object (%v %v)", tok, err)
	}
	if err := checkTiling(path, infos, dataLen); err != nil {
		return nil, nil, err
	}
	return infos, meta, nil
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil // MLX writes "__metadata__":null when it has none
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("want an object of strings: %v", err)
	}
	return m, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func parseEntry(name string, raw json.RawMessage, dataLen int64) (TensorInfo, error) {
	info := TensorInfo{Name: name}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return info, fmt.Errorf("entry is %s, want an object with dtype, shape and data_offsets", truncate(raw))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return info, fmt.Errorf("entry: %v", err)
	}
	for _, k := range []string{"dtype", "shape", "data_offsets"} {
		if isNull(fields[k]) {
			return info, fmt.Errorf("entry has no %q", k)
		}
	}
	var dts string
	if err := json.Unmarshal(fields["dtype"], &dts); err != nil {
		return info, fmt.Errorf("dtype is %s, want a string", truncate(fields["dtype"]))
	}
	dt, ok := headerDTypes[dts]
	if !ok {
		return info, fmt.Errorf("unknown dtype %q", dts)
	}
	info.DType, info.HeaderDType = dt, dts
	dims, err := parseInts("shape", fields["shape"])
	if err != nil {
		return info, err
	}
	offs, err := parseInts("data_offsets", fields["data_offsets"])
	if err != nil {
		return info, err
	}
	if len(offs) != 2 {
		return info, fmt.Errorf("data_offsets has %d values, want [begin, end]", len(offs))
	}
	info.Begin, info.End = offs[0], offs[1]
	if info.Begin > info.End || info.End > dataLen {
		return info, fmt.Errorf("data_offsets [%d, %d] not within 0 <= begin <= end <= %d (the data length)", info.Begin, info.End, dataLen)
	}
	elems := int64(1)
	for _, d := range dims {
		if d != 0 && elems > dataLen/d {
			return info, fmt.Errorf("shape %v has more elements than the data area has bytes (%d)", dims, dataLen)
		}
		elems *= d
		info.Shape = append(info.Shape, int(d))
	}
	if info.Shape == nil {
		info.Shape = Shape{}
	}
	if want := elems * int64(dt.Size()); want != info.End-info.Begin {
		return info, fmt.Errorf("shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d", info.Shape, dts, want, info.Begin, info.End, info.End-info.Begin)
	}
	return info, nil
}

// parseInts decodes a JSON array of non-negative integers (no fractions or exponents).
func parseInts(field string, raw json.RawMessage) ([]int64, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%s is %s, want an array of non-negative integers", field, truncate(raw))
	}
	out := make([]int64, len(items))
	for i, it := range items {
		v, err := strconv.ParseInt(string(bytes.TrimSpace(it)), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s[%d] is %s, want a non-negative integer", field, i, truncate(it))
		}
		out[i] = v
	}
	return out, nil
}

func truncate(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// checkTiling sorts infos by offset and checks that they cover [0, dataLen)
// exactly once.
func checkTiling(path string, infos []TensorInfo, dataLen int64) error {
	sort.SliceStable(infos, func(i, j int) bool {
		if infos[i].Begin != infos[j].Begin {
			return infos[i].Begin < infos[j].Begin
		}
		return infos[i].End < infos[j].End
	})
	var pos int64
	prev := ""
	for _, in := range infos {
		switch {
		case in.Begin < pos:
			return tensorErr(path, in.Name, "data_offsets [%d, %d] overlap tensor %q, which ends at %d", in.Begin, in.End, prev, pos)
		case in.Begin > pos:
			after := "the start of the data area"
			if prev != "" {
				after = fmt.Sprintf("tensor %q", prev)
			}
			return tensorErr(path, in.Name, "data_offsets [%d, %d] leave a hole of %d unreferenced bytes after %s (safetensors forbids holes)", in.Begin, in.End, in.Begin-pos, after)
		}
		pos, prev = in.End, in.Name
	}
	if pos != dataLen {
		if prev == "" {
			return fileErr(path, "header lists no tensors but the data area holds %d bytes", dataLen)
		}
		return fileErr(path, "%d trailing bytes after the last tensor %q (ends at %d of %d)", dataLen-pos, prev, pos, dataLen)
	}
	return nil
}

// Path returns the path the file was opened with.
func (f *SafetensorsFile) Path() string { return f.path }

// Names returns the tensor names in file order (sorted by data offset).
func (f *SafetensorsFile) Names() []string {
	out := make([]string, len(f.infos))
	for i, in := range f.infos {
		out[i] = in.Name
	}
	return out
}

// Info returns the description of the named tensor.
func (f *SafetensorsFile) Info(name string) (TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	in := f.infos[i]
	in.Shape = in.Shape.Clone()
	return in, true
}

// Metadata returns the header's "__metadata__" map (nil when absent or null).
// The caller must not modify it.
func (f *SafetensorsFile) Metadata() map[string]string { return f.meta }

// bytesOf returns the named tensor's bytes inside the mapping.
func (f *SafetensorsFile) bytesOf(name string) (TensorInfo, []byte, error) {
	if f.mapped == nil {
		return TensorInfo{}, nil, fileErr(f.path, "tensor %q: file is closed", name)
	}
	in, ok := f.Info(name)
	if !ok {
		return in, nil, fileErr(f.path, "no tensor %q", name)
	}
	b, e := f.dataStart+in.Begin, f.dataStart+in.End
	return in, f.mapped[b:e:e], nil
}

// Tensor returns the named tensor. When its data is aligned in memory for its
// dtype (address a multiple of DType.Size()), Data is a zero-copy view into
// the read-only mapping: do not write to it, and do not use it after Close.
// Otherwise (MLX writes unaligned offsets) Data is an aligned copy, so typed
// views such as Float32s always work on the result. Use TensorCopy for a
// tensor that outlives the file. The error names the file and tensor.
func (f *SafetensorsFile) Tensor(name string) (*Dense, error) {
	in, b, err := f.bytesOf(name)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%uintptr(in.DType.Size()) != 0 {
		c := alignedBytes(len(b))
		copy(c, b)
		b = c
	}
	return &Dense{DType: in.DType, Shape: in.Shape, Data: b}, nil
}

// TensorCopy returns the named tensor with its data copied into fresh,
// aligned, writable memory that stays valid after Close.
func (f *SafetensorsFile) TensorCopy(name string) (*Dense, error) {
	in, b, err := f.bytesOf(name)
	if err != nil {
		return nil, err
	}
	c := alignedBytes(len(b))
	copy(c, b)
	return &Dense{DType: in.DType, Shape: in.Shape, Data: c}, nil
}

// IsView reports whether t's data lies inside this file's mapping.
func (f *SafetensorsFile) IsView(t *Dense) bool {
	if f.mapped == nil || len(t.Data) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(&f.mapped[0]))
	p := uintptr(unsafe.Pointer(&t.Data[0]))
	return p >= lo && p < lo+uintptr(len(f.mapped))
}

// Close unmaps the file. Views returned by Tensor become invalid (reading them
// faults). Closing twice is a no-op.
func (f *SafetensorsFile) Close() error {
	if f.mapped == nil {
		return nil
	}
	err := f.unmap(f.mapped)
	f.mapped = nil
	if err != nil {
		return fileErr(f.path, "unmapping: %v", err)
	}
	return nil
}

// WriteSafetensors writes tensors under names, in the order given, to path.
// The header lists metadata as "__metadata__" when metadata is non-nil, is
// padded with spaces so the data area starts 8-byte aligned, and the file is
// written to a temporary file in the same directory and renamed into place.
// Errors name the file and the offending tensor.
func WriteSafetensors(path string, names []string, tensors []*Dense, metadata map[string]string) (err error) {
	if len(names) != len(tensors) {
		return fileErr(path, "%d names for %d tensors", len(names), len(tensors))
	}
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	if metadata != nil {
		m, err := json.Marshal(metadata) // keys sorted
		if err != nil {
			return fileErr(path, "__metadata__: %v", err)
		}
		hdr.WriteString(`"__metadata__":`)
		hdr.Write(m)
	}
	seen := map[string]bool{}
	var off int64
	for i, name := range names {
		t := tensors[i]
		switch {
		case name == "__metadata__":
			return tensorErr(path, name, "name is reserved for metadata")
		case seen[name]:
			return tensorErr(path, name, "name given twice")
		case t == nil:
			return tensorErr(path, name, "tensor is nil")
		case !t.DType.valid():
			return tensorErr(path, name, "invalid dtype %v", t.DType)
		}
		seen[name] = true
		for _, d := range t.Shape {
			if d < 0 {
				return tensorErr(path, name, "negative dimension in shape %v", t.Shape)
			}
		}
		if want := t.Shape.Size() * t.DType.Size(); len(t.Data) != want {
			return tensorErr(path, name, "has %d data bytes, shape %v of %v needs %d", len(t.Data), t.Shape, t.DType, want)
		}
		if hdr.Len() > 1 {
			hdr.WriteByte(',')
		}
		key, _ := json.Marshal(name)
		shape := []int(t.Shape)
		if shape == nil {
			shape = []int{}
		}
		sh, _ := json.Marshal(shape)
		end := off + int64(len(t.Data))
		fmt.Fprintf(&hdr, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, key, t.DType, sh, off, end)
		off = end
	}
	hdr.WriteByte('}')
	for (8+hdr.Len())%8 != 0 {
		hdr.WriteByte(' ')
	}

	err = atomicfile.Write(path, func(w *bufio.Writer) error {
		var lenBuf [8]byte
		binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
		w.Write(lenBuf[:])
		w.Write(hdr.Bytes())
		for _, t := range tensors {
			w.Write(t.Data)
		}
		return nil // a write error stays in w and comes back from its Flush
	})
	if err != nil {
		return fmt.Errorf("safetensors %s: writing: %w", path, err)
	}
	return nil
}
