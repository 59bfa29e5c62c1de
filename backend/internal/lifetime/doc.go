// Package lifetime is the array lifetime layer every backend shares: scopes,
// Keep, Release, the ledger behind backend.Stats, the garbage-collector
// safety net, and the checks that turn a nil, released or foreign array
// argument into an *backend.OpError. A backend supplies only what is its
// own: what an array holds and how to free it.
//
// # What a backend writes
//
// Its array type embeds State by value (through an unexported alias, so
// the field stays unexported) and is used through a pointer:
//
//	type lifeState = lifetime.State
//
//	type Array struct {
//		lifeState
//		h handle // whatever the backend frees
//		...
//	}
//
// It implements Hooks for that pointer type and R, the type of what an
// array at the outermost level leaves behind for the safety net (a C
// handle and its size, a reference on a shared buffer), and makes one
// Tracker when it opens:
//
//	b.life = lifetime.New[*Array, root]("mlx", hooks{b})
//
// Then every op result goes through Add, every array argument through Arg,
// Backend.Release through Release, Backend.Scope through Open (a *Scope
// is the backend.Scope), Backend.Stats through Stats and Backend.Close
// through Close.
//
// # The rules it keeps
//
//   - An array made while a scope is open belongs to the innermost one.
//     Scope.Close frees every array that still belongs to it, in one
//     Hooks.Free call; Keep moves arrays to the enclosing scope, or to the
//     outermost level when the scope is the outermost one. Keeping an array
//     of an inner scope that is still open, or keeping on a closed scope,
//     panics with an *backend.OpError. Closing a scope first closes the
//     inner scopes still open; closing twice does nothing.
//   - An array at the outermost level lives until Release (or Close). It
//     alone can be dropped unreleased, so it alone gets the safety net: a
//     runtime.AddCleanup whose cleanup only queues a note (the array's root
//     id) for the backend's thread. The tracker applies the queued notes at
//     the start of its next Add, Release, Scope.Close, Stats or Drain: the
//     array leaves the counts, Stats.LeakedByGC grows by one, and Hooks.Drop
//     frees what Hooks.Root kept. An array in a scope needs no safety net:
//     the scope's list keeps it reachable until the scope frees it. With
//     TraceLeaksEnv set when the tracker is made, each array reaching the
//     outermost level has its stack recorded, and each note applied is
//     reported on standard error with that stack.
//   - Release is idempotent; nil arrays are skipped, another backend's
//     array panics.
//   - Stats counts live arrays, the bytes the backend reports for them
//     (Add's argument, and what Free and Drop return), their peak, and
//     LeakedByGC. A backend that shares storage between arrays counts a
//     buffer's bytes once: it passes them to Add for the first array on the
//     buffer and returns them from Free or Drop for the last.
//   - Close closes the open scopes, applies the queued notes and drops
//     every array left at the outermost level. Afterwards every array of
//     the tracker counts as released and Arg reports the backend closed.
//
// # Threads
//
// A Tracker belongs to one goroutine at a time, the backend's: only the
// safety net's cleanup, which runs on a runtime goroutine, touches it from
// elsewhere, and only the note queue (under a mutex). A backend bound to a
// thread of its own (MLX) says so through Hooks.OnThread and Hooks.Run:
// Scope.Keep and Scope.Close then hop to that thread, and the backend's own
// entry points (Stats included) must hop there before calling the tracker.
package lifetime
