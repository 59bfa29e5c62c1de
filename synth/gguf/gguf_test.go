package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sampleKVs() []KV {
	return []KV{
		{"general.architecture", Str("llama")},
		{"general.alignment", U32(64)},
		{"a.u8", Value{Type: Uint8, Uint: 200, Int: 200}},
		{"a.i8", Value{Type: Int8, Int: -5}},
		{"a.u16", Value{Type: Uint16, Uint: 65535, Int: 65535}},
		{"a.i16", Value{Type: Int16, Int: -30000}},
		{"a.i32", I32(-7)},
		{"a.f32", F32v(1e-5)},
		{"a.bool", BoolV(true)},
		{"a.u64", U64(1 << 40)},
		{"a.i64", Value{Type: Int64, Int: -1 << 40}},
		{"a.f64", Value{Type: Float64, F: 0.1}},
		{"a.strs", Strs([]string{"<unk>", "", "héllo"})},
		{"a.f32s", F32s([]float64{0, -1.5, 3})},
		{"a.i32s", I32s([]int64{1, -2, 6})},
		{"a.bools", Value{Type: Array, Elem: Bool, Ints: []int64{1, 0}}},
	}
}

// sampleTensors: an F32 vector, a Q4_0 and a Q8_0 matrix. Sizes by hand:
// F32 [3]: 12 bytes; Q4_0 [64, 2]: 2 rows × 2 blocks × 18 = 72;
// Q8_0 [32, 3]: 3 rows × 1 block × 34 = 102.
func sampleTensors() ([]TensorInfo, []uint64) {
	return []TensorInfo{
		{Name: "norm.weight", Dims: []uint64{3}, Type: F32},
		{Name: "blk.0.attn_q.weight", Dims: []uint64{64, 2}, Type: Q4_0},
		{Name: "output.weight", Dims: []uint64{32, 3}, Type: Q8_0},
	}, []uint64{12, 72, 102}
}

func fillPattern(i int, n uint64) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*31 + j)
	}
	return b
}

func writeSample(t *testing.T, path string) []TensorInfo {
	t.Helper()
	ts, _ := sampleTensors()
	err := Write(path, sampleKVs(), ts, func(i int, w io.Writer) error {
		_, err := w.Write(fillPattern(i, ts[i].Size))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	written := writeSample(t, path)
	_, sizes := sampleTensors()
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != 64 {
		t.Errorf("alignment: got %d, want 64", f.Alignment)
	}
	want := sampleKVs()
	if len(f.KVs) != len(want) {
		t.Fatalf("metadata entries: got %d, want %d", len(f.KVs), len(want))
	}
	for i, kv := range want {
		got := f.KVs[i]
		if got.Key != kv.Key {
			t.Errorf("metadata key %d: got %q, want %q", i, got.Key, kv.Key)
			continue
		}
		w := kv.Value
		if w.Type == Float32 { // stored as float32
			w.F = float64(float32(w.F))
		}
		if w.Type == Int32 || w.Type == Int8 || w.Type == Int16 || w.Type == Int64 {
			w.Uint = 0
		}
		if w.Type == Array && len(w.Ints) == 0 {
			w.Ints = nil
		}
		if !reflect.DeepEqual(got.Value, w) {
			t.Errorf("metadata %s: got %+v, want %+v", kv.Key, got.Value, w)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.DataOffset%64 != 0 || uint64(len(data))%64 != 0 {
		t.Errorf("data section at %d, file size %d: want both multiples of 64", f.DataOffset, len(data))
	}
	for i, tw := range written {
		tr := f.Tensors[i]
		if tr.Name != tw.Name || !reflect.DeepEqual(tr.Dims, tw.Dims) || tr.Type != tw.Type || tr.Offset != tw.Offset {
			t.Errorf("tensor %d: got %+v, want %+v", i, tr, tw)
		}
		if tr.Size != sizes[i] {
			t.Errorf("tensor %s size: got %d, want %d", tr.Name, tr.Size, sizes[i])
		}
		if tr.Offset%64 != 0 {
			t.Errorf("tensor %s offset %d is not 64-aligned", tr.Name, tr.Offset)
		}
		got := data[f.DataOffset+tr.Offset : f.DataOffset+tr.Offset+tr.Size]
		if !bytes.Equal(got, fillPattern(i, sizes[i])) {
			t.Errorf("tensor %s: data differs", tr.Name)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		tensors []TensorInfo
		short   bool
		want    string
	}{
		{"q4_0 row not a block multiple", []TensorInfo{{Name: "x", Dims: []uint64{48, 2}, Type: Q4_0}}, false, "multiple of the block size 32"},
		{"unknown type", []TensorInfo{{Name: "x", Dims: []uint64{4}, Type: 99}}, false, "unknown"},
		{"fill writes too little", []TensorInfo{{Name: "x", Dims: []uint64{4}, Type: F32}}, true, "wrote 15 bytes, want 16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "e.gguf")
			err := Write(path, nil, c.tensors, func(i int, w io.Writer) error {
				n := c.tensors[i].Size
				if c.short {
					n--
				}
				_, err := w.Write(make([]byte, n))
				return err
			})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error %v, want one containing %q", err, c.want)
			}
			if _, err := os.Stat(path); err == nil {
				t.Errorf("file %s exists after a failed write", path)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gguf")
	writeSample(t, good)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		mutate func([]byte) []byte
		want   string
	}{
		{"bad magic", func(b []byte) []byte { copy(b, "GGUX"); return b }, "magic"},
		{"version 2", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 2); return b }, "version 2, want 3"},
		{"huge tensor count", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[8:], 1<<40); return b }, "more than"},
		{"truncated header", func(b []byte) []byte { return b[:100] }, "truncated"},
		{"truncated data", func(b []byte) []byte { return b[:f.DataOffset+100] }, "runs past the end of the file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.gguf")
			if err := os.WriteFile(path, c.mutate(bytes.Clone(data)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Read(path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got error %v, want one naming %s and containing %q", err, path, c.want)
			}
		})
	}
}
