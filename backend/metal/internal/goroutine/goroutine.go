// Package goroutine identifies the calling goroutine cheaply, so the MLX
// backend can tell whether an op runs on its worker goroutine without a cgo
// call per op. It is separate from package metal because a package that uses
// cgo cannot hold Go assembly.
package goroutine
