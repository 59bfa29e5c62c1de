package gguf

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tensor"
)

// mxLoadScript prints, for every array mx.load makes of a GGUF file, its
// dtype, shape and the sha256 of its little-endian bytes.
const mxLoadScript = `
import hashlib, json, sys, numpy as np, mlx.core as mx
mx.set_default_device(mx.cpu)
out = {}
for k, v in mx.load(sys.argv[1]).items():
    if v.dtype == mx.bfloat16:
        a, dt = np.array(v.view(mx.uint16)), "bfloat16"
    else:
        a = np.array(v); dt = str(a.dtype)
    out[k] = {"dtype": dt, "shape": list(a.shape), "sha256": hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()}
print(json.dumps(out))
`

// TestMatchesMLXLoader writes a GGUF file with random Q4_0, Q4_1, Q8_0,
// F32, F16 and BF16 tensors and requires Convert to give the very bytes
// MLX's own GGUF loader (mx.load) gives: codes, scales and biases. The one
// difference is BF16, which mx.load converts to F16 and Convert keeps.
func TestMatchesMLXLoader(t *testing.T) {
	py := testenv.Python(t)
	rng := rand.New(rand.NewPCG(1, 2))
	randBlocks := func(typ Type, n int) []byte {
		b := make([]byte, n*typ.BlockBytes())
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		// Finite F16 scale (and Q4_1 min) fields in a moderate range.
		for k := range n {
			blk := b[k*typ.BlockBytes():]
			binary.LittleEndian.PutUint16(blk, tensor.Float32ToF16(float32(rng.NormFloat64()*0.02)))
			if typ == Q4_1 {
				binary.LittleEndian.PutUint16(blk[2:], tensor.Float32ToF16(float32(rng.NormFloat64()*0.1)))
			}
		}
		return b
	}
	randFloats := func(dt tensor.DType, n int) []byte {
		b := make([]byte, n*dt.Size())
		for i := range n {
			v := float32(rng.NormFloat64())
			switch dt {
			case tensor.F32:
				binary.LittleEndian.PutUint32(b[4*i:], mathFloat32bits(v))
			case tensor.F16:
				binary.LittleEndian.PutUint16(b[2*i:], tensor.Float32ToF16(v))
			case tensor.BF16:
				binary.LittleEndian.PutUint16(b[2*i:], tensor.Float32ToBF16(v))
			}
		}
		return b
	}
	ts := []WriteTensor{
		{Name: "q40.weight", Dims: []uint64{64, 3}, Type: Q4_0, Data: randBlocks(Q4_0, 6)},
		{Name: "q41.weight", Dims: []uint64{96, 2}, Type: Q4_1, Data: randBlocks(Q4_1, 6)},
		{Name: "q80.weight", Dims: []uint64{32, 5}, Type: Q8_0, Data: randBlocks(Q8_0, 5)},
		{Name: "f32.weight", Dims: []uint64{7, 2}, Type: F32, Data: randFloats(tensor.F32, 14)},
		{Name: "f16.weight", Dims: []uint64{5}, Type: F16, Data: randFloats(tensor.F16, 5)},
		{Name: "bf16.weight", Dims: []uint64{3, 4}, Type: BF16, Data: randFloats(tensor.BF16, 12)},
	}
	path := writeTemp(t, []KV{{"general.architecture", Str("llama")}}, ts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, py, "-c", mxLoadScript, path)
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("mx.load failed: %v\n%s", err, stderr.String())
	}
	var want map[string]struct {
		DType  string
		Shape  []int
		SHA256 string
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := 0
	for _, ti := range f.Tensors {
		c, err := f.Convert(ti)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(ti.Name, ".weight")
		parts := map[string]*tensor.Dense{ti.Name: c.Weight}
		if c.Quantized() {
			parts[base+".scales"], parts[base+".biases"] = c.Scales, c.Biases
		}
		for name, d := range parts {
			w, ok := want[name]
			if !ok {
				t.Errorf("%s: mx.load has no such array", name)
				continue
			}
			seen++
			if d.DType == tensor.BF16 {
				// mx.load turns BF16 into F16 (lossy); Convert keeps BF16.
				// Compare through MLX's rounding of our values to F16.
				d = d.Convert(tensor.F16)
			}
			sum := sha256.Sum256(d.Data)
			if got := hex.EncodeToString(sum[:]); got != w.SHA256 || d.DType.MLXName() != w.DType || !d.Shape.Equal(tensor.Shape(w.Shape)) {
				t.Errorf("%s: got %s %v sha256 %s…, want mx.load's %s %v %s…", name, d.DType.MLXName(), d.Shape, got[:12], w.DType, w.Shape, w.SHA256[:12])
			}
		}
	}
	if seen != len(want) {
		t.Errorf("compared %d arrays, mx.load made %d", seen, len(want))
	}
}

func mathFloat32bits(v float32) uint32 { return math.Float32bits(v) }
