//go:build mlx && !mlxc_system

package metal

// #include "mlxgo.h"
// int mlxgo_fast_cross_entropy(mlx_array* res, const mlx_array logits, const mlx_array targets, const mlx_stream s);
import "C"

import "github.com/mlxgo/mlxgo/backend"

var _ backend.CrossEntropyFuser = (*Backend)(nil)

// FusesCrossEntropy implements backend.CrossEntropyFuser: true on the GPU
// (Metal or CUDA), where mlx.nn.losses.cross_entropy calls
// mx.fast.cross_entropy; MLX's CPU has no fused kernel.
func (b *Backend) FusesCrossEntropy() bool { return b.device == "gpu" }

// FusedCrossEntropy implements backend.CrossEntropyFuser with
// mx.fast.cross_entropy (on any device; on the CPU MLX computes it op by
// op).
func (b *Backend) FusedCrossEntropy(logits, targets backend.Array) backend.Array {
	var out backend.Array
	b.do("FusedCrossEntropy", func() {
		a := b.use("FusedCrossEntropy", logits, targets)
		var h C.mlx_array
		out = b.wrap("FusedCrossEntropy", C.mlxgo_fast_cross_entropy(&h, a[0].h, a[1].h, b.s), h, logits, targets)
	})
	return out
}
