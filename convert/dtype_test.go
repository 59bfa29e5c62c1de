package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/x448/float16"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tensor"
)

// mlxLMConvert is mlx_lm's convert of an MLX model directory (argv 1) to
// argv 2 with dtype argv 3: the oracle of Options.DType.
const mlxLMConvert = `
import sys
from mlx_lm import convert
convert(sys.argv[1], sys.argv[2], dtype=sys.argv[3])
`

// TestConvertDTypeMLX: converting the real SmolLM2 GGUF with DType float16,
// bfloat16 or float32 gives, tensor for tensor, the bytes mlx_lm's convert
// (--dtype) writes from our plain conversion: every floating tensor (the
// float32 norms, the float16 scales and biases) cast, the packed weights
// as they were.
func TestConvertDTypeMLX(t *testing.T) {
	py := testenv.Python(t)
	plain := smolDir(t)
	for _, dt := range ConvertDTypes {
		t.Run(dt.MLXName(), func(t *testing.T) {
			ours := t.TempDir()
			if _, err := Convert(testenv.SmolLM2GGUF(t), ours, Options{DType: dt}); err != nil {
				t.Fatal(err)
			}
			theirs := filepath.Join(t.TempDir(), "mlx_lm")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, py, "-c", mlxLMConvert, plain, theirs, dt.MLXName())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("mlx_lm convert --dtype %s: %v\n%s", dt.MLXName(), err, out)
			}
			want, err := tensor.OpenSafetensorsDir(theirs)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			got, err := tensor.OpenSafetensorsDir(ours)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			if g, w := len(got.Names()), len(want.Names()); g != w {
				t.Fatalf("%d tensors, mlx_lm wrote %d", g, w)
			}
			floats := 0
			for _, name := range want.Names() {
				w, g := tensorPair(t, want, got, name)
				if g.DType != w.DType || !g.Shape.Equal(w.Shape) || !bytes.Equal(g.Data, w.Data) {
					t.Fatalf("%s: %v %v, mlx_lm %v %v (bytes equal: %v)", name, g.DType, g.Shape, w.DType, w.Shape, bytes.Equal(g.Data, w.Data))
				}
				if w.DType == dt {
					floats++
				}
			}
			if floats == 0 {
				t.Fatalf("no tensor of type %v: the cast did not happen", dt)
			}
		})
	}
	if _, err := os.Stat(plain); err != nil {
		t.Fatal(err)
	}
}

// tensorPair reads tensor name from want and from got (which must have it).
func tensorPair(t *testing.T, want, got *tensor.SafetensorsSet, name string) (w, g *tensor.Dense) {
	t.Helper()
	w, err := want.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	if g, err = got.Tensor(name); err != nil {
		t.Fatalf("%s: %v (the reference has it)", name, err)
	}
	return w, g
}

// castOracle is an element's value in dt by a plain route independent of
// tensor.Dense.Convert: float16 through x448/float16's conversion, bfloat16
// by rounding the float32 bits to nearest even by hand.
func castOracle(v float32, dt tensor.DType) []byte {
	switch dt {
	case tensor.F16:
		return binary.LittleEndian.AppendUint16(nil, float16.Fromfloat32(v).Bits())
	case tensor.BF16:
		b := math.Float32bits(v)
		return binary.LittleEndian.AppendUint16(nil, uint16((b+0x7fff+(b>>16&1))>>16))
	}
	return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))
}

// TestConvertDType: on the tiny GGUF (float32 norms and matrix, float16 and
// bfloat16 matrices, 4/8-bit weights with float16 scales, K-quants
// dequantized to float32), every floating tensor of the DType conversion
// is the plain conversion's cast element by element (castOracle), every
// other tensor is unchanged, and the model loads; with Requantize the
// dequantized matrices are cast and then quantized, mlx_lm's order.
func TestConvertDType(t *testing.T) {
	src := tinyGGUF(t, nil)
	plain := t.TempDir()
	if _, err := Convert(src, plain, Options{}); err != nil {
		t.Fatal(err)
	}
	want, err := tensor.OpenSafetensorsDir(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	for _, dt := range ConvertDTypes {
		t.Run(dt.MLXName(), func(t *testing.T) {
			out := t.TempDir()
			res, err := Convert(src, out, Options{DType: dt})
			if err != nil {
				t.Fatal(err)
			}
			if dt != tensor.F32 && (len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "saved as "+dt.MLXName())) {
				t.Errorf("notes %q: want the dequantized tensors said to be saved as %s", res.Notes, dt.MLXName())
			}
			got, err := tensor.OpenSafetensorsDir(out)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			cast := 0
			for _, name := range want.Names() {
				w, g := tensorPair(t, want, got, name)
				if !g.Shape.Equal(w.Shape) {
					t.Fatalf("%s: shape %v, plain %v", name, g.Shape, w.Shape)
				}
				if !w.DType.IsFloat() {
					if g.DType != w.DType || !bytes.Equal(g.Data, w.Data) {
						t.Fatalf("%s: a %v tensor changed", name, w.DType)
					}
					continue
				}
				if g.DType != dt {
					t.Fatalf("%s: %v, want %v (plain %v)", name, g.DType, dt, w.DType)
				}
				vals := make([]float32, w.Shape.Size())
				w.Float32sAt(vals, 0)
				var exp []byte
				for _, v := range vals {
					exp = append(exp, castOracle(v, dt)...)
				}
				if !bytes.Equal(g.Data, exp) {
					t.Fatalf("%s: %v → %v differs from the element-wise cast", name, w.DType, dt)
				}
				if w.DType != dt {
					cast++
				}
			}
			if cast == 0 {
				t.Fatal("no tensor changed type")
			}
			ck, err := checkpoint.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			ck.Close()
		})
	}
	t.Run("requantize/float16", func(t *testing.T) {
		out := t.TempDir()
		if _, err := Convert(src, out, Options{DType: tensor.F16, Requantize: true, Bits: 8, GroupSize: 64}); err != nil {
			t.Fatal(err)
		}
		got, err := tensor.OpenSafetensorsDir(out)
		if err != nil {
			t.Fatal(err)
		}
		defer got.Close()
		rq, err := newRequantizer(8, 64)
		if err != nil {
			t.Fatal(err)
		}
		defer rq.close()
		// The dequantized matrices of the plain conversion, cast to float16
		// and then quantized (mlx_lm's order), give the bytes written.
		for _, mod := range []string{"model.layers.0.self_attn.o_proj", "model.layers.0.mlp.down_proj"} {
			w, err := want.Tensor(mod + ".weight")
			if err != nil {
				t.Fatal(err)
			}
			c, err := rq.quantize(w.Convert(tensor.F16))
			if err != nil {
				t.Fatal(err)
			}
			if c.Scales.DType != tensor.F16 {
				t.Errorf("%s: requantizing a float16 weight gave %v scales", mod, c.Scales.DType)
			}
			for part, exp := range map[string]*tensor.Dense{"weight": c.Weight, "scales": c.Scales, "biases": c.Biases} {
				g, err := got.Tensor(mod + "." + part)
				if err != nil {
					t.Fatal(err)
				}
				if g.DType != exp.DType || !bytes.Equal(g.Data, exp.Data) {
					t.Errorf("%s.%s: %v, want %v from the float16 weight requantized (bytes equal: %v)", mod, part, g.DType, exp.DType, bytes.Equal(g.Data, exp.Data))
				}
			}
		}
	})
}
