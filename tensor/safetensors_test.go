package tensor

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile writes an 8-byte little-endian header length, header and data to dir/name.
func rawFile(t *testing.T, dir, name string, hdrLen uint64, header string, data []byte) string {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, hdrLen)
	b = append(append(b, header...), data...)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// sample returns one tensor of every dtype with distinctive contents.
func sample() ([]string, []*Dense) {
	var names []string
	var ts []*Dense
	for d := Bool; d <= F64; d++ {
		n := 5
		x := New(d, Shape{n})
		for i := range x.Data {
			x.Data[i] = byte(31*i + int(d))
		}
		if d == Bool {
			copy(x.Data, []byte{1, 0, 1, 1, 0})
		}
		names = append(names, "t."+d.String())
		ts = append(ts, x)
	}
	names = append(names, "scalar", "empty", "matrix")
	ts = append(ts, FromFloat32(Shape{}, []float32{3.25}), New(F16, Shape{0, 4}),
		FromInt32(Shape{2, 3}, []int32{1, -2, 3, -4, 5, -6}))
	return names, ts
}

func TestSafetensorsRoundTrip(t *testing.T) {
	for _, meta := range []map[string]string{nil, {"format": "mlx", "note": "ü \"q\""}} {
		t.Run("meta="+map[bool]string{true: "nil", false: "map"}[meta == nil], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rt.safetensors")
			names, ts := sample()
			if err := WriteSafetensors(path, names, ts, meta); err != nil {
				t.Fatal(err)
			}
			f, err := OpenSafetensors(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := strings.Join(f.Names(), ","); got != strings.Join(names, ",") {
				t.Errorf("Names: got %s, want %s", got, strings.Join(names, ","))
			}
			if len(f.Metadata()) != len(meta) || (meta != nil && f.Metadata()["note"] != meta["note"]) {
				t.Errorf("Metadata: got %v, want %v", f.Metadata(), meta)
			}
			for i, name := range names {
				got, err := f.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if got.DType != ts[i].DType || !got.Shape.Equal(ts[i].Shape) || string(got.Data) != string(ts[i].Data) {
					t.Errorf("got %v %v % x, want %v %v % x (%s)", got.DType, got.Shape, got.Data, ts[i].DType, ts[i].Shape, ts[i].Data, name)
				}
				info, ok := f.Info(name)
				if !ok || info.HeaderDType != ts[i].DType.String() || info.End-info.Begin != int64(len(ts[i].Data)) {
					t.Errorf("Info: got %+v, %v (%s)", info, ok, name)
				}
			}
			if _, err := f.Tensor("nope"); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"nope"`) {
				t.Errorf("missing tensor: got %v, want an error naming %s and \"nope\"", err, path)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Tensor(names[0]); err == nil || !strings.Contains(err.Error(), "closed") {
				t.Errorf("after Close: got %v, want a closed error", err)
			}
		})
	}
}

// With the header padded to 8 bytes by WriteSafetensors, a U8 tensor of 3
// bytes first puts the next F32 at data offset 3 (unaligned: copied), while an
// F32 at offset 0 is aligned (a view).
func TestSafetensorsViewOrCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "align.safetensors")
	a := FromFloat32(Shape{2}, []float32{1, 2})
	b := New(U8, Shape{3})
	c := FromFloat32(Shape{2}, []float32{-1.5, 8})
	d := encode(F16, 0x3C00, 0xC000) // at offset 8+3+8 = 19: odd, unaligned for 2 bytes
	if err := WriteSafetensors(path, []string{"a", "b", "c", "d"}, []*Dense{a, b, c, d}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cases := []struct {
		name string
		view bool
		want []float32
	}{
		{"a", true, []float32{1, 2}},
		{"c", false, []float32{-1.5, 8}},
		{"d", false, []float32{1, -2}},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			x, err := f.Tensor(cs.name)
			if err != nil {
				t.Fatal(err)
			}
			if f.IsView(x) != cs.view {
				t.Errorf("view: got %v, want %v", f.IsView(x), cs.view)
			}
			got := x.ToFloat32()
			if x.DType == F32 {
				got = x.Float32s() // must not panic on either path
			} else {
				_ = x.Uint16s()
			}
			for i := range cs.want {
				if got[i] != cs.want[i] {
					t.Errorf("got %v, want %v (index %d)", got[i], cs.want[i], i)
				}
			}
			cp, err := f.TensorCopy(cs.name)
			if err != nil || f.IsView(cp) || string(cp.Data) != string(x.Data) {
				t.Errorf("TensorCopy: got view=%v err=%v", f.IsView(cp), err)
			}
		})
	}
}

// MLX writes "__metadata__":null, does not pad its header, and may write
// F8_E4M3 / F8_E8M0 tensors, which it loads as uint8.
func TestSafetensorsMLXStyle(t *testing.T) {
	hdr := `{"__metadata__":null,"s":{"data_offsets":[0,4],"dtype":"F32","shape":[]},"q":{"data_offsets":[4,6],"dtype":"F8_E4M3","shape":[2]},"e":{"data_offsets":[6,7],"dtype":"F8_E8M0","shape":[1]}}`
	data := []byte{0, 0, 0x80, 0x3F, 0x38, 0xB8, 0x7F}
	p := rawFile(t, t.TempDir(), "mlx.safetensors", uint64(len(hdr)), hdr, data)
	f, err := OpenSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata() != nil {
		t.Errorf("Metadata: got %v, want nil", f.Metadata())
	}
	if got := strings.Join(f.Names(), ","); got != "s,q,e" {
		t.Errorf("Names: got %s, want s,q,e (file order)", got)
	}
	s, _ := f.Tensor("s")
	if s.ToFloat32()[0] != 1 || len(s.Shape) != 0 {
		t.Errorf("scalar: got %v shape %v, want 1 []", s.ToFloat32(), s.Shape)
	}
	for _, c := range []struct{ name, hdr string }{{"q", "F8_E4M3"}, {"e", "F8_E8M0"}} {
		info, _ := f.Info(c.name)
		x, _ := f.Tensor(c.name)
		if info.DType != U8 || info.HeaderDType != c.hdr || x.DType != U8 {
			t.Errorf("%s: got %v/%s, want U8/%s", c.name, info.DType, info.HeaderDType, c.hdr)
		}
	}
}

func TestSafetensorsBadInput(t *testing.T) {
	dir := t.TempDir()
	f32 := func(name, offs, shape string) string {
		return `"` + name + `":{"dtype":"F32","shape":` + shape + `,"data_offsets":` + offs + `}`
	}
	cases := []struct {
		name   string
		hdrLen int64 // -1: len(header)
		header string
		data   int // data bytes
		want   []string
	}{
		{"short-file", -2, "", 0, []string{"shorter than the 8-byte"}},
		{"header-beyond-file", 100, `{}`, 0, []string{"runs past the end"}},
		{"header-beyond-bound", 200_000_000, `{}`, 0, []string{"exceeds the limit"}},
		{"header-len-zero", 0, ``, 0, []string{"not valid JSON"}},
		{"invalid-json", -1, `{"w": {`, 0, []string{"not valid JSON"}},
		{"json-trailing", -1, `{} {}`, 0, []string{"after its JSON object"}},
		{"not-object", -1, `[1,2]`, 0, []string{"not a JSON object"}},
		{"entry-not-object", -1, `{"w":[1,2]}`, 0, []string{`"w"`, "want an object"}},
		{"entry-string", -1, `{"w":"F32"}`, 0, []string{`"w"`, "want an object"}},
		{"missing-dtype", -1, `{"w":{"shape":[1],"data_offsets":[0,4]}}`, 4, []string{`"w"`, `no "dtype"`}},
		{"dtype-not-string", -1, `{"w":{"dtype":3,"shape":[1],"data_offsets":[0,4]}}`, 4, []string{`"w"`, "want a string"}},
		{"unknown-dtype", -1, `{"w":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}}`, 4, []string{`"w"`, `unknown dtype "F7"`}},
		{"mlx-spelling-in-file", -1, `{"w":{"dtype":"float32","shape":[1],"data_offsets":[0,4]}}`, 4, []string{`"w"`, `unknown dtype "float32"`}},
		{"negative-shape", -1, `{` + f32("w", "[0,4]", "[-1]") + `}`, 4, []string{`"w"`, "shape[0] is -1"}},
		{"fractional-shape", -1, `{` + f32("w", "[0,4]", "[1.0]") + `}`, 4, []string{`"w"`, "shape[0] is 1.0"}},
		{"string-shape", -1, `{` + f32("w", "[0,4]", `["1"]`) + `}`, 4, []string{`"w"`, "shape[0]"}},
		{"shape-not-array", -1, `{` + f32("w", "[0,4]", `1`) + `}`, 4, []string{`"w"`, "shape is 1"}},
		{"begin-after-end", -1, `{` + f32("w", "[4,0]", "[1]") + `}`, 4, []string{`"w"`, "[4, 0]"}},
		{"end-beyond-data", -1, `{` + f32("w", "[0,8]", "[2]") + `}`, 4, []string{`"w"`, "<= 4"}},
		{"negative-offset", -1, `{` + f32("w", "[-4,0]", "[1]") + `}`, 4, []string{`"w"`, "data_offsets[0] is -4"}},
		{"three-offsets", -1, `{` + f32("w", "[0,4,4]", "[1]") + `}`, 4, []string{`"w"`, "3 values"}},
		{"size-mismatch", -1, `{` + f32("w", "[0,8]", "[3]") + `}`, 8, []string{`"w"`, "needs 12 bytes", "hold 8"}},
		{"huge-shape", -1, `{` + f32("w", "[0,8]", "[4294967296,4294967296,4294967296]") + `}`, 8, []string{`"w"`, "more elements"}},
		{"overlap", -1, `{` + f32("a", "[0,8]", "[2]") + `,` + f32("b", "[4,12]", "[2]") + `}`, 12, []string{`"b"`, `overlap tensor "a"`}},
		{"hole", -1, `{` + f32("a", "[0,4]", "[1]") + `,` + f32("b", "[8,12]", "[1]") + `}`, 12, []string{`"b"`, "hole of 4", `"a"`}},
		{"hole-at-start", -1, `{` + f32("a", "[4,8]", "[1]") + `}`, 8, []string{`"a"`, "hole of 4", "start of the data area"}},
		{"trailing-bytes", -1, `{` + f32("a", "[0,4]", "[1]") + `}`, 6, []string{`"a"`, "2 trailing bytes"}},
		{"no-tensors-but-data", -1, `{}`, 4, []string{"no tensors", "4 bytes"}},
		{"duplicate-name", -1, `{` + f32("a", "[0,4]", "[1]") + `,` + f32("a", "[4,8]", "[1]") + `}`, 8, []string{`"a"`, "twice"}},
		{"metadata-not-strings", -1, `{"__metadata__":{"k":1},` + f32("a", "[0,4]", "[1]") + `}`, 4, []string{"__metadata__", "object of strings"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p string
			switch c.hdrLen {
			case -2:
				p = filepath.Join(dir, c.name+".safetensors")
				if err := os.WriteFile(p, []byte{1, 2, 3, 4, 5}, 0o644); err != nil {
					t.Fatal(err)
				}
			case -1:
				p = rawFile(t, dir, c.name+".safetensors", uint64(len(c.header)), c.header, make([]byte, c.data))
			default:
				p = rawFile(t, dir, c.name+".safetensors", uint64(c.hdrLen), c.header, make([]byte, c.data))
			}
			f, err := OpenSafetensors(p)
			if err == nil {
				f.Close()
				t.Fatalf("got no error, want one containing %q", c.want)
			}
			for _, w := range append([]string{p}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got error %q, want it to contain %q", err, w)
				}
			}
		})
	}
	t.Run("missing-file", func(t *testing.T) {
		p := filepath.Join(dir, "absent.safetensors")
		if _, err := OpenSafetensors(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("got %v, want an error naming %s", err, p)
		}
	})
}

func TestWriteSafetensorsBadInput(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.safetensors")
	ok := FromFloat32(Shape{1}, []float32{1})
	cases := []struct {
		name    string
		names   []string
		tensors []*Dense
		want    string
	}{
		{"count", []string{"a"}, nil, "1 names for 0 tensors"},
		{"duplicate", []string{"a", "a"}, []*Dense{ok, ok}, `"a": name given twice`},
		{"reserved", []string{"__metadata__"}, []*Dense{ok}, "reserved"},
		{"nil", []string{"a"}, []*Dense{nil}, `"a": tensor is nil`},
		{"bad-len", []string{"a"}, []*Dense{{DType: F32, Shape: Shape{2}, Data: make([]byte, 4)}}, `"a": has 4 data bytes`},
		{"bad-dtype", []string{"a"}, []*Dense{{DType: Invalid, Shape: Shape{1}, Data: make([]byte, 4)}}, "invalid dtype"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := WriteSafetensors(p, c.names, c.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("got %v, want an error naming %s and containing %q", err, p, c.want)
			}
			if _, serr := os.Stat(p); serr == nil {
				t.Errorf("file %s exists after a failed write", p)
			}
		})
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 0 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}
