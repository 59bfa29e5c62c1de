package tensor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// runPython runs script with args and returns its stdout.
func runPython(t *testing.T, py, script string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", script}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python failed: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	return out
}

type sidecarTensor struct {
	Name  string   `json:"name,omitempty"`
	DType string   `json:"dtype"` // MLX / numpy name
	Shape []int    `json:"shape"`
	Bits  []uint64 `json:"bits"` // raw little-endian element bits
}

func elementBits(t *Dense) []uint64 {
	n, sz := t.Shape.Size(), t.DType.Size()
	out := make([]uint64, n)
	for i := range out {
		var b [8]byte
		copy(b[:], t.Data[i*sz:(i+1)*sz])
		out[i] = binary.LittleEndian.Uint64(b[:])
	}
	return out
}

const pyReadGoFiles = `
import json, sys
import numpy as np
import mlx.core as mx
from safetensors.numpy import load_file

d = sys.argv[1]
side = json.load(open(d + "/sidecar.json"))
NPU = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
MXU = {1: mx.uint8, 2: mx.uint16, 4: mx.uint32, 8: mx.uint64}
checked, errors = 0, []
for fname, spec in side.items():
    path = d + "/" + fname
    want_names = sorted(t["name"] for t in spec["tensors"])
    dtypes = {t["dtype"] for t in spec["tensors"]}
    loaders = []
    if "bfloat16" not in dtypes:  # numpy has no bfloat16
        loaders.append(("numpy", load_file(path)))
    if "float64" not in dtypes:  # mx.load 0.32 rejects F64
        arrs, meta = mx.load(path, return_metadata=True)
        if meta != spec["metadata"]:
            errors.append(f"mlx {fname}: metadata {meta}, want {spec['metadata']}")
        loaders.append(("mlx", arrs))
    for lname, arrs in loaders:
        if sorted(arrs) != want_names:
            errors.append(f"{lname} {fname}: names {sorted(arrs)}, want {want_names}")
            continue
        for t in spec["tensors"]:
            a = arrs[t["name"]]
            if lname == "numpy":
                dt = str(a.dtype)
                bits = np.ascontiguousarray(a).view(NPU[a.dtype.itemsize]).ravel().tolist()
            else:
                dt = str(a.dtype).removeprefix("mlx.core.")
                if a.dtype == mx.bool_:
                    bits = np.array(a).view(np.uint8).ravel().tolist()
                else:
                    bits = np.array(a.view(MXU[a.dtype.size])).ravel().tolist()
            if dt != t["dtype"] or list(a.shape) != t["shape"] or bits != t["bits"]:
                errors.append(f"{lname} {fname} {t['name']}: got {dt} {list(a.shape)} {bits[:6]}, want {t['dtype']} {t['shape']} {t['bits'][:6]}")
            checked += 1
print(json.dumps({"checked": checked, "errors": errors}))
`

// Go writes, numpy's safetensors loader and MLX read back bit for bit.
func TestPythonReadsGoFiles(t *testing.T) {
	py := testenv.Python(t)
	dir := t.TempDir()
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -2.5, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(1), math.MaxFloat32, 65504, 1e-6}
	ints := []int32{math.MinInt32, -1, 0, 1, math.MaxInt32, 7, 300, -300, 65535, 12345, -77}
	mk := func(dt DType) *Dense {
		var x *Dense
		if dt.IsFloat() {
			x = FromFloat32(Shape{len(specials)}, specials).Convert(dt)
		} else {
			x = FromInt32(Shape{len(ints)}, ints).Convert(dt)
		}
		return x
	}
	type entry struct {
		name string
		x    *Dense
	}
	typed := func(first []entry, dts ...DType) []entry {
		for _, dt := range dts {
			first = append(first, entry{"t_" + dt.String(), mk(dt)})
		}
		return first
	}
	files := []struct {
		name    string
		entries []entry
		meta    map[string]string
	}{
		// Read by MLX only (numpy cannot hold BF16). A 3-byte U8 first makes later offsets unaligned.
		{"all.safetensors", append(typed([]entry{{"odd", New(U8, Shape{3})}},
			BF16, F32, F16, Bool, I8, U16, I16, U32, I32, U64, I64, U8),
			entry{"scalar", FromFloat32(Shape{}, []float32{3.5})}),
			map[string]string{"format": "mlx", "by": "mlxgo"}},
		// Read by numpy only (MLX 0.32 cannot load F64).
		{"nobf16.safetensors", append(typed(nil, F64, U8, F32, F16, Bool, I8, U16, I16, U32, I32, U64, I64),
			entry{"scalar", FromFloat64(Shape{}, []float64{0.1})}, entry{"empty", New(F32, Shape{0, 2})},
			entry{"matrix", FromFloat32(Shape{2, 3}, []float32{1, 2, 3, 4, 5, 6})}),
			nil},
	}
	side := map[string]any{}
	for _, f := range files {
		var names []string
		var ts []*Dense
		var spec []sidecarTensor
		for _, e := range f.entries {
			names, ts = append(names, e.name), append(ts, e.x)
			spec = append(spec, sidecarTensor{Name: e.name, DType: e.x.DType.MLXName(), Shape: append([]int{}, e.x.Shape...), Bits: elementBits(e.x)})
		}
		if err := WriteSafetensors(filepath.Join(dir, f.name), names, ts, f.meta); err != nil {
			t.Fatal(err)
		}
		meta := f.meta
		if meta == nil {
			meta = map[string]string{}
		}
		side[f.name] = map[string]any{"tensors": spec, "metadata": meta}
	}
	b, _ := json.Marshal(side)
	if err := os.WriteFile(filepath.Join(dir, "sidecar.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Checked int      `json:"checked"`
		Errors  []string `json:"errors"`
	}
	out := runPython(t, py, pyReadGoFiles, dir)
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("python output %q: %v", out, err)
	}
	for _, e := range res.Errors {
		t.Error(e)
	}
	// all: 14 tensors read by MLX; nobf16: 15 tensors read by numpy.
	if res.Checked != 14+15 {
		t.Errorf("python checked %d tensors, want %d", res.Checked, 14+15)
	}
}

const pyWriteMLXFiles = `
import json, sys
import numpy as np
import mlx.core as mx

d = sys.argv[1]
rng = np.random.default_rng(0)
MXU = {1: mx.uint8, 2: mx.uint16, 4: mx.uint32, 8: mx.uint64}
def bits(a):
    if a.dtype == mx.bool_:
        return np.array(a).view(np.uint8).ravel().tolist()
    return np.array(a.view(MXU[a.dtype.size])).ravel().tolist()
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
arrs = {
    "bf16": mx.array(f32(3, 5)).astype(mx.bfloat16),
    "bf16_b": mx.array(f32(3)).astype(mx.bfloat16),
    "bf16_c": mx.array(f32(1)).astype(mx.bfloat16),
    "f16": mx.array(f32(7)).astype(mx.float16),
    "f32": mx.array(f32(2, 3)),
    "f32_b": mx.array(f32(1)),
    "scalar": mx.array(2.5),
    "i32": mx.array(np.array([-2**31, -1, 0, 2**31 - 1], dtype=np.int32)),
    "u32": mx.array(np.array([0, 2**32 - 1], dtype=np.uint32)),
    "i64": mx.array(np.array([-2**63, 5], dtype=np.int64)),
    "u64": mx.array(np.array([2**64 - 1], dtype=np.uint64)),
    "i16": mx.array(np.array([-32768, 3, 32767], dtype=np.int16)),
    "u16": mx.array(np.array([65535], dtype=np.uint16)),
    "i8": mx.array(np.array([-128, 127], dtype=np.int8)),
    "bool": mx.array([True, False, True]),
    "u8_a": mx.array(np.arange(3, dtype=np.uint8)),
    "u8_b": mx.array(np.arange(5, dtype=np.uint8)),
    "u8_c": mx.array(np.arange(1, dtype=np.uint8)),
}
mx.save_safetensors(d + "/mlx.safetensors", arrs, metadata={"format": "mlx"})
side = {k: {"dtype": str(v.dtype).removeprefix("mlx.core."), "shape": list(v.shape), "bits": bits(v)} for k, v in arrs.items()}
json.dump(side, open(d + "/mlx_sidecar.json", "w"))

# Conversion oracle: float32 -> bf16/f16 on edge, tie and random values,
# and the exhaustive widening of every 16-bit pattern.
edge = [0x00000000, 0x80000000, 0x3F800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
        0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
        0x00010000, 0x00008000, 0x00018000, 0x007F0000, 0x7F7F0000, 0x7F7F8000, 0x7F7F7FFF,
        0x7F7FFFFF, 0xFF7FFFFF, 0x3F808000, 0x3F818000, 0xBF818000, 0x3F808001, 0x3F807FFF,
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x33800000, 0x33000000, 0x33400000, 0x33000001,
        0x387FC000, 0x38800000, 0x3F801000, 0x3F803000, 0xBF803000]
def rnd(n):
    return rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
ties_bf = (rnd(1000) & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
near_f16 = (rnd(1000) & np.uint32(0x807FFFFF)) | (rng.integers(98, 145, size=1000).astype(np.uint32) << np.uint32(23))
ties_f16 = (near_f16 & np.uint32(0xFFFFE000)) | np.uint32(0x1000)
src_bits = np.concatenate([np.array(edge, dtype=np.uint32), rnd(3000), ties_bf, near_f16, ties_f16])
s = mx.array(src_bits).view(mx.float32)
h = mx.array(np.arange(65536, dtype=np.uint16))
conv = {
    "src": s,
    "bf16": s.astype(mx.bfloat16).view(mx.uint16),
    "f16": s.astype(mx.float16).view(mx.uint16),
    "bf16_wide": h.view(mx.bfloat16).astype(mx.float32).view(mx.uint32),
    "f16_wide": h.view(mx.float16).astype(mx.float32).view(mx.uint32),
}
mx.save_safetensors(d + "/conv.safetensors", conv)
print(json.dumps({"n": int(src_bits.size)}))
`

// MLX writes (unpadded header, unaligned offsets, bf16); Go reads bit for bit.
// The same run checks Float32ToBF16/F16 and the widenings against MLX's astype.
func TestPythonMLXWritesGoReads(t *testing.T) {
	py := testenv.Python(t)
	dir := t.TempDir()
	var res struct {
		N int `json:"n"`
	}
	if out := runPython(t, py, pyWriteMLXFiles, dir); json.Unmarshal(out, &res) != nil || res.N < 5000 {
		t.Fatalf("python output %q, want {\"n\": >=5000}", out)
	}

	t.Run("file", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "mlx_sidecar.json"))
		if err != nil {
			t.Fatal(err)
		}
		var side map[string]sidecarTensor
		if err := json.Unmarshal(raw, &side); err != nil {
			t.Fatal(err)
		}
		f, err := OpenSafetensors(filepath.Join(dir, "mlx.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if f.Metadata()["format"] != "mlx" || len(f.Names()) != len(side) {
			t.Errorf("got metadata %v and %d names, want format=mlx and %d", f.Metadata(), len(f.Names()), len(side))
		}
		copies, bf16Copies := 0, 0
		for name, want := range side {
			x, err := f.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			if x.DType.MLXName() != want.DType || !x.Shape.Equal(want.Shape) {
				t.Errorf("got %v %v, want %s %v (%s)", x.DType, x.Shape, want.DType, want.Shape, name)
				continue
			}
			got := elementBits(x)
			for i := range want.Bits {
				if got[i] != want.Bits[i] {
					t.Errorf("got %#x, want %#x (%s, index %d)", got[i], want.Bits[i], name, i)
					break
				}
			}
			if x.DType.Size() > 1 && !f.IsView(x) {
				copies++
				if x.DType == BF16 {
					bf16Copies++
					_ = x.Uint16s() // the copy is aligned
				}
			}
		}
		if copies == 0 || bf16Copies == 0 {
			t.Errorf("got %d unaligned tensors (%d BF16), want at least one of each: the copy path went untested", copies, bf16Copies)
		}
		t.Logf("%d tensors, %d read through the unaligned-copy path (%d BF16)", len(side), copies, bf16Copies)
	})

	t.Run("conversions", func(t *testing.T) {
		f, err := OpenSafetensors(filepath.Join(dir, "conv.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		get := func(name string) *Dense {
			x, err := f.TensorCopy(name)
			if err != nil {
				t.Fatal(err)
			}
			return x
		}
		src, bf, hf := get("src").Float32s(), get("bf16").Uint16s(), get("f16").Uint16s()
		nanDiffs := 0
		for i, x := range src {
			if got := Float32ToBF16(x); got != bf[i] {
				t.Errorf("Float32ToBF16: got %#04x, want %#04x (input %#08x, index %d)", got, bf[i], math.Float32bits(x), i)
			}
			got := Float32ToF16(x)
			gotNaN, wantNaN := got&0x7C00 == 0x7C00 && got&0x3FF != 0, hf[i]&0x7C00 == 0x7C00 && hf[i]&0x3FF != 0
			switch {
			case gotNaN && wantNaN:
				if got != hf[i] {
					nanDiffs++ // documented: MLX's x86 fp16 type writes sign|0x7D00
				}
			case got != hf[i]:
				t.Errorf("Float32ToF16: got %#04x, want %#04x (input %#08x, index %d)", got, hf[i], math.Float32bits(x), i)
			}
		}
		bw, hw := get("bf16_wide").Uint32s(), get("f16_wide").Uint32s()
		for h := 0; h < 1<<16; h++ {
			if got := math.Float32bits(BF16ToFloat32(uint16(h))); got != bw[h] {
				t.Errorf("BF16ToFloat32: got %#08x, want %#08x (input %#04x)", got, bw[h], h)
			}
			got := F16ToFloat32(uint16(h))
			want := math.Float32frombits(hw[h])
			if math.Float32bits(got) != hw[h] && !(got != got && want != want) {
				t.Errorf("F16ToFloat32: got %#08x, want %#08x (input %#04x)", math.Float32bits(got), hw[h], h)
			}
		}
		t.Logf("%d float32 values checked against MLX astype; %d f16 NaNs differ only in NaN bits", len(src), nanDiffs)
	})
}
