//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import "github.com/mlxgo/mlxgo/backend/metal/internal/goroutine"

// curg identifies the calling goroutine for worker.here: its runtime
// descriptor where package goroutine can read it, else (through cgo) its
// thread, which is as good since the worker is locked to its thread and no
// other goroutine runs there. The worker records its own at start and clears
// it when it ends, so a descriptor reused by a later goroutine never matches.
func curg() uintptr {
	if goroutine.Supported {
		return goroutine.Current()
	}
	return uintptr(C.mlxgo_self())
}
