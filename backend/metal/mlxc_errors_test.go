//go:build mlx

package metal

import (
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestErrorHasNoSourceLocation: mlx-c appends " at <its source file>:<line>"
// to every message, mlxgo's subset does not; the Go error carries MLX's
// message alone in both builds.
func TestErrorHasNoSourceLocation(t *testing.T) {
	b := open(t)
	err := catch(func() { b.Reshape(b.Zeros([]int{2, 3}, tensor.F32), 7) })
	if err == nil {
		t.Fatal("reshaping 6 elements to 7 did not fail")
	}
	msg := err.Error()
	if !strings.Contains(msg, "reshape") {
		t.Errorf("got %q, want MLX's reshape message", msg)
	}
	if mlxcLocation.MatchString(msg) || strings.Contains(msg, ".cpp:") {
		t.Errorf("got %q: it ends with a source location", msg)
	}
}

func TestTrimSourceLocation(t *testing.T) {
	for in, want := range map[string]string{
		"[reshape] Cannot reshape array of size 6 into shape (7). at /tmp/mlx-c/mlx/c/ops.cpp:2713": "[reshape] Cannot reshape array of size 6 into shape (7).",
		"[reshape] Cannot reshape array of size 6 into shape (7).":                                  "[reshape] Cannot reshape array of size 6 into shape (7).",
		"mlx_closure returned a non-zero value at mlx/c/closure.cpp:80":                             "mlx_closure returned a non-zero value",
		"look at me: 3": "look at me: 3",
		"":              "",
	} {
		if got := trimSourceLocation(in); got != want {
			t.Errorf("trimSourceLocation(%q) = %q, want %q", in, got, want)
		}
	}
}
