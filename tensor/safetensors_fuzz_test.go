package tensor

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

var safetensorsSeeds = []string{
	"../conformance/testdata/ops/add__bcast__f32__3x1x5_4x1.safetensors",
	"../conformance/testdata/ops/abs__bf16__3x67.safetensors",
}

// FuzzOpenSafetensors: any file either fails with an error naming it or opens with every
// tensor readable; header lengths, offsets and shapes are checked against the file before
// anything is allocated.
func FuzzOpenSafetensors(f *testing.F) {
	for _, p := range safetensorsSeeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	hdr := func(h string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(b, h...)
	}
	f.Add(hdr(`{"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}`))
	f.Add(hdr(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}` + "abcd"))
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 1<<62), '{'))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.safetensors")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := OpenSafetensors(path)
		if err != nil {
			return
		}
		defer sf.Close()
		for _, n := range sf.Names() {
			if _, err := sf.Tensor(n); err != nil {
				t.Fatalf("tensor %s of an opened file: %v", n, err)
			}
		}
	})
}

// FuzzSafetensorsIndex: any model.safetensors.index.json beside a valid shard either is
// consistent with it or fails with an error naming the index.
func FuzzSafetensorsIndex(f *testing.F) {
	shard, err := os.ReadFile(safetensorsSeeds[0])
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"metadata": {}, "weight_map": {"in.a": "model.safetensors", "in.b": "model.safetensors", "out.y": "model.safetensors", "ref.y": "model.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"in.a": "../../etc/passwd"}}`))
	f.Add([]byte(`{"weight_map": null}`))
	f.Add([]byte(`[]`))
	if idx, err := os.ReadFile("../conformance/testdata/models/q4g64-bf16/model.safetensors.index.json"); err == nil {
		f.Add(idx)
	}
	f.Fuzz(func(t *testing.T, index []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), shard, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, IndexFileName), index, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSafetensorsDir(dir)
		if err != nil {
			return
		}
		s.Close()
	})
}
