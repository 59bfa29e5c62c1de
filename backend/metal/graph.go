//go:build mlx && !mlxc_system

package metal

// #include "mlxgo.h"
// char* mlxgo_graph_ops(const mlx_array* outs, size_t n);
import "C"

import (
	"strings"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
)

// GraphOps walks the lazy graph that computes arrays and returns how many
// MLX primitives in it are still to run, by primitive name (MLX's own
// names: "QuantizedMatmul", "RMSNorm", ...). Arrays already evaluated count
// nothing. It is a diagnostic, for comparing the graphs mlxgo and mlx_lm
// build, and exists only with mlxgo's own mlx-c subset (not mlxc_system).
func (b *Backend) GraphOps(arrays ...backend.Array) (map[string]int, error) {
	var names string
	var err error
	b.do("GraphOps", func() {
		hs := make([]C.mlx_array, 0, len(arrays))
		for i := range arrays {
			hs = append(hs, b.arg("GraphOps", arrays, i).h)
		}
		if len(hs) == 0 {
			return
		}
		p := C.mlxgo_graph_ops(&hs[0], C.size_t(len(hs)))
		if p == nil {
			err = b.opError("GraphOps", arrays)
			return
		}
		names = C.GoString(p)
		C.free(unsafe.Pointer(p))
	})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, n := range strings.Split(names, "\n") {
		if n != "" {
			out[n]++
		}
	}
	return out, nil
}
