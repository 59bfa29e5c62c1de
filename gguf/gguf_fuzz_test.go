package gguf

import (
	"testing"
)

// fuzzSeedGGUF is a small valid GGUF file: metadata of every value type and a tensor of
// each type Convert reads.
func fuzzSeedGGUF(tb testing.TB) []byte {
	tb.Helper()
	kvs := []KV{
		{Key: "general.architecture", Value: Str("llama")},
		{Key: "llama.block_count", Value: U32(1)},
		{Key: "general.alignment", Value: U32(32)},
		{Key: "x.bool", Value: BoolValue(true)},
		{Key: "x.f32", Value: F32Value(1.5)},
		{Key: "x.strs", Value: Strs([]string{"a", "bc", ""})},
		{Key: "x.i32s", Value: I32s([]int32{1, -2, 3})},
		{Key: "x.f32s", Value: F32s([]float32{0.5, 2})},
	}
	var ts []WriteTensor
	for _, typ := range Supported {
		n := typ.BlockSize()
		if n < 32 {
			n = 32
		}
		ts = append(ts, WriteTensor{Name: "t." + typ.String(), Dims: []uint64{uint64(n), 2}, Type: typ,
			Data: make([]byte, 2*n/typ.BlockSize()*typ.BlockBytes())})
	}
	data, err := Encode(kvs, ts)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// FuzzParse: any bytes either fail to parse with an error naming the file or give a File
// whose tensors convert (or fail) without panicking; counts and sizes are checked against
// the file's length before anything is allocated.
func FuzzParse(f *testing.F) {
	seed := fuzzSeedGGUF(f)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add(seed[:40])
	f.Add([]byte("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.gguf", data)
		if err != nil {
			return
		}
		for _, ti := range file.Tensors {
			if ti.Size > 1<<20 {
				continue
			}
			_, _ = file.Convert(ti)
		}
	})
}
