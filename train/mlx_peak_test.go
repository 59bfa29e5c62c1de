//go:build mlx

package train

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/metal"
)

func init() {
	devicePeak = func(b backend.Backend) (func(), func() int64) {
		m, ok := b.(*metal.Backend)
		if !ok {
			return nil, nil
		}
		return m.ResetPeakMemory, func() int64 { return m.Memory().Peak }
	}
}
