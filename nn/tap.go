package nn

import "github.com/mlxgo/mlxgo/backend"

// Tap receives a named intermediate array as soon as the layer has computed
// it (numerical debugging: package debug records taps). The array belongs to
// the layer's scope: a tap that keeps it must copy it (ToHost) before
// returning. A nil Tap is never called, so tracing costs nothing when off.
type Tap func(name string, x backend.Array)

// Prefixed returns a Tap that calls tap with prefix+name, or nil when tap is
// nil.
func Prefixed(tap Tap, prefix string) Tap {
	if tap == nil {
		return nil
	}
	return func(name string, x backend.Array) { tap(prefix+name, x) }
}
