package gguf

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// streamTensors: an F32 vector, a Q4_0 and a Q8_0 matrix. Sizes by hand:
// F32 [3]: 12 bytes; Q4_0 [64, 2]: 2 rows × 2 blocks × 18 = 72;
// Q8_0 [32, 3]: 3 rows × 1 block × 34 = 102.
func streamTensors() ([]WriteTensor, []uint64) {
	return []WriteTensor{
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

// TestWriteStreaming writes tensors through fill, with alignment 64, and
// reads them back: the infos, sizes, 64-aligned offsets, a file size that is
// a multiple of 64, and every tensor's bytes.
func TestWriteStreaming(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	ts, sizes := streamTensors()
	kvs := []KV{{"general.architecture", Str("llama")}, {"general.alignment", U32(64)}}
	err := Write(path, kvs, ts, func(i int, w io.Writer) error {
		_, err := w.Write(fillPattern(i, sizes[i]))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := os.Stat(path); err != nil || f.Alignment != 64 || f.DataOffset%64 != 0 || st.Size()%64 != 0 {
		t.Fatalf("alignment %d, data section at %d, file stat %v %v: want 64 and both multiples of 64", f.Alignment, f.DataOffset, st, err)
	}
	if len(f.Tensors) != len(ts) {
		t.Fatalf("tensors: got %d, want %d", len(f.Tensors), len(ts))
	}
	for i, tw := range ts {
		tr := f.Tensors[i]
		if tr.Name != tw.Name || !slices.Equal(tr.Dims, tw.Dims) || tr.Type != tw.Type || tr.Size != sizes[i] || tr.Offset%64 != 0 {
			t.Errorf("got %s %v %s size %d offset %d, want %s %v %s size %d at a multiple of 64 (index %d)",
				tr.Name, tr.Dims, tr.Type, tr.Size, tr.Offset, tw.Name, tw.Dims, tw.Type, sizes[i], i)
		}
		if !bytes.Equal(f.Data(tr), fillPattern(i, sizes[i])) {
			t.Errorf("tensor %s: data differs", tr.Name)
		}
	}
}

// TestWriteErrors: bad tensors, bad metadata and a fill that writes the
// wrong count fail with an error naming the file and the entry, and leave
// no file behind.
func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		kvs     []KV
		tensors []WriteTensor
		short   bool
		want    string
	}{
		{"q4_0 row not a block multiple", nil, []WriteTensor{{Name: "x", Dims: []uint64{48, 2}, Type: Q4_0}}, false, "tensor x: row length ne[0] = 48 is not a multiple of Q4_0's block size 32"},
		{"unknown type", nil, []WriteTensor{{Name: "x", Dims: []uint64{4}, Type: 99}}, false, "tensor x: unknown ggml type 99"},
		{"fill writes too little", nil, []WriteTensor{{Name: "x", Dims: []uint64{4}, Type: F32}}, true, "tensor x: wrote 15 bytes, want 16"},
		{"alignment not a power of two", []KV{{"general.alignment", U32(48)}}, nil, false, "general.alignment = 48"},
		{"value of the wrong Go type", []KV{{"k", Value{Type: TypeUint32, V: uint8(1)}}}, nil, false, "metadata k: value 1 (uint8) does not fit type uint32"},
		{"array of the wrong element type", []KV{{"k", Value{Type: TypeArray, Elem: TypeInt32, V: []float32{1}}}}, nil, false, "metadata k: array []float32 does not fit element type int32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "e.gguf")
			err := Write(path, c.kvs, c.tensors, func(i int, w io.Writer) error {
				n, _ := c.tensors[i].Type.Bytes(c.tensors[i].Dims)
				if c.short {
					n--
				}
				_, err := w.Write(make([]byte, n))
				return err
			})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got error %v, want one naming %s and containing %q", err, path, c.want)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Errorf("files left after a failed write: %v", left)
			}
		})
	}
}

// TestEncodeDataSize: WriteFile and Encode take each tensor's Data, which
// must hold exactly the tensor's bytes.
func TestEncodeDataSize(t *testing.T) {
	_, err := Encode(nil, []WriteTensor{{Name: "x", Dims: []uint64{32, 2}, Type: Q8_0, Data: make([]byte, 67)}})
	if err == nil || !strings.Contains(err.Error(), "tensor x: 67 bytes of data, want 68") {
		t.Fatalf("got %v, want an error naming tensor x and its 67 of 68 bytes", err)
	}
}
