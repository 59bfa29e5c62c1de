//go:build mlx && mlxc_system

package metal

import (
	"errors"

	"github.com/mlxgo/mlxgo/backend"
)

// FusesCrossEntropy is false with the system's mlx-c (older releases lack
// mlx_fast_cross_entropy; see crossentropy.go): the loss is computed op by
// op on every device.
func (b *Backend) FusesCrossEntropy() bool { return false }

// FusedCrossEntropy needs mlxgo's own mlx-c subset: with the tag
// mlxc_system it panics.
func (b *Backend) FusedCrossEntropy(logits, targets backend.Array) backend.Array {
	panic(&backend.OpError{Op: "FusedCrossEntropy", Err: errors.New("mlx backend: mx.fast.cross_entropy needs mlxgo's own mlx-c subset (built without the tag mlxc_system)")})
}
