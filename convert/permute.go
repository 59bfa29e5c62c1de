package convert

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// unpermuteRows undoes llama.cpp's q/k row permutation on t's first axis:
// with hd = rows/nHead, output row h·hd + j·hd/2 + i is input row
// h·hd + 2i + j. Any tensor whose first axis is the output features works:
// float weights, packed codes, scales, biases and 1-D bias vectors.
func unpermuteRows(t *tensor.Dense, nHead int) (*tensor.Dense, error) {
	if len(t.Shape) == 0 {
		return nil, fmt.Errorf("cannot permute a scalar")
	}
	rows := t.Shape[0]
	if nHead <= 0 || rows%nHead != 0 || (rows/nHead)%2 != 0 {
		return nil, fmt.Errorf("%d rows do not split into %d heads of even size", rows, nHead)
	}
	hd := rows / nHead
	rowBytes := len(t.Data) / rows
	out := tensor.New(t.DType, t.Shape)
	for h := range nHead {
		for i := range hd / 2 {
			for j := range 2 {
				dst := h*hd + j*hd/2 + i
				src := h*hd + 2*i + j
				copy(out.Data[dst*rowBytes:(dst+1)*rowBytes], t.Data[src*rowBytes:(src+1)*rowBytes])
			}
		}
	}
	return out, nil
}
