//go:build mlx

package main

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/metal"
)

func init() {
	devicePeakMemory = func(b backend.Backend) func() int64 {
		if m, ok := b.(*metal.Backend); ok {
			return func() int64 { return m.Memory().Peak }
		}
		return nil
	}
}
