package convert

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
				w, err := want.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				g, err := got.Tensor(name)
				if err != nil {
					t.Fatalf("%s: %v (mlx_lm wrote it)", name, err)
				}
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
