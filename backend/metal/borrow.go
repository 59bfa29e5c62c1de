//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

var (
	borrowsAlive atomic.Int64 // host buffers MLX still references through Borrow
	nextPin      atomic.Uintptr
	pins         sync.Map // id -> *runtime.Pinner, until MLX lets the buffer go
)

// Borrow hands t's memory to MLX through mlx_array_new_data_managed_payload,
// which uses it without a copy where MLX's allocator can wrap foreign memory
// (Metal's make_buffer) and copies it otherwise: MLX's CPU allocator on Linux
// cannot, so there Borrow costs what FromHost does (measured in
// TestBorrowIsZeroCopy). The array counts in Stats.LiveBytes only when MLX
// copied. When aliased, t must stay valid and unmodified until MLX lets it
// go, which can be after the array is released while a pending graph still
// reads it; MLX never writes such a buffer (it does not own it, so never
// donates it). Go-heap memory is pinned until MLX lets it go; memory-mapped
// files need no pinning. When MLX copied and t lies in a read-only file
// mapping (a checkpoint), Borrow drops those pages from the process's
// resident set (they stay in the page cache; see dropCopiedPages), so the
// weights are not resident twice. Empty tensors and data not aligned to its
// element size are copied as by FromHost.
func (b *Backend) Borrow(t *tensor.Dense) backend.Array {
	checkDense("Borrow", t)
	if len(t.Data) == 0 || uintptr(unsafe.Pointer(&t.Data[0]))%uintptr(t.DType.Size()) != 0 {
		return b.FromHost(t)
	}
	var out *Array
	b.do("Borrow", func() {
		dt := mlxDType("Borrow", t.DType)
		p := new(runtime.Pinner)
		p.Pin(&t.Data[0])
		id := nextPin.Add(1)
		pins.Store(id, p)
		borrowsAlive.Add(1)
		shape := cints(t.Shape)
		arr := C.mlxgo_borrow(unsafe.Pointer(&t.Data[0]), ptr(shape), C.int(len(shape)), dt, C.uintptr_t(id))
		if arr.ctx == nil {
			// MLX did not take the buffer; unpin now (a late call back finds nothing).
			borrowDone(id)
		}
		aliased := arr.ctx != nil && unsafe.Pointer(C.mlx_array_data_uint8(arr)) == unsafe.Pointer(&t.Data[0])
		out = b.wrapAs("Borrow", 0, arr, aliased, nil)
		if !aliased {
			// MLX made its own copy and let t go: a memory-mapped t
			// need not stay resident beside it.
			dropCopiedPages(t.Data)
		}
	})
	return out
}

// Aliased reports whether a was made by Borrow and uses the caller's memory
// without a copy.
func (a *Array) Aliased() bool { return a.borrowed }

// BorrowsAlive reports how many borrowed host buffers MLX still references
// (across all backends).
func BorrowsAlive() int64 { return borrowsAlive.Load() }

//export mlxgoBorrowDone
func mlxgoBorrowDone(h C.uintptr_t) { borrowDone(uintptr(h)) }

// borrowDone unpins buffer id once (it may run on any thread).
func borrowDone(id uintptr) {
	if p, ok := pins.LoadAndDelete(id); ok {
		p.(*runtime.Pinner).Unpin()
		borrowsAlive.Add(-1)
	}
}
