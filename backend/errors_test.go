package backend

import (
	"errors"
	"strings"
	"testing"
)

func TestOpErrorMessage(t *testing.T) {
	many := func(n int, s string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cause := errors.New("no implementation")
	tests := []struct {
		name string
		e    OpError
		want string
	}{
		{"no arguments", OpError{Op: "Do", Err: cause}, "Do: no implementation"},
		{"two arguments", OpError{Op: "Add", Shapes: []string{"[2 3]", "[3]"}, DTypes: []string{"F32", "BF16"}, Err: cause},
			"Add (shapes [2 3], [3]; dtypes F32, BF16): no implementation"},
		{"eight listed whole", OpError{Op: "Eval", Shapes: many(8, "[1]"), DTypes: many(8, "U32"), Err: cause},
			"Eval (shapes " + strings.Repeat("[1], ", 7) + "[1]; dtypes " + strings.Repeat("U32, ", 7) + "U32): no implementation"},
		{"150 summarised", OpError{Op: "Eval", Shapes: many(150, "[1 2 512 32]"), DTypes: many(150, "BF16"), Err: cause},
			"Eval (shapes " + strings.Repeat("[1 2 512 32], ", 8) + "... 142 more of 150; dtypes " + strings.Repeat("BF16, ", 8) + "... 142 more of 150): no implementation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.e.Error(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if !errors.Is(&tc.e, cause) {
				t.Error("the cause does not unwrap")
			}
		})
	}
}
