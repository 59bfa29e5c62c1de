package backend

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupported is wrapped by an OpError when a backend lacks an (op, dtype)
// combination. Conformance reports it as a failure.
var ErrUnsupported = errors.New("unsupported")

// OpError describes an op called against its contract (a bug), or a failure
// inside a backend. Ops panic with it; Recover turns it into an error.
type OpError struct {
	Op     string   // the op, e.g. "QuantizedMatmul"
	Shapes []string // the argument shapes, for the message
	DTypes []string // the argument dtypes
	Err    error    // what went wrong
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if len(e.Shapes) > 0 {
		fmt.Fprintf(&b, " (shapes %s", listed(e.Shapes))
		if len(e.DTypes) > 0 {
			fmt.Fprintf(&b, "; dtypes %s", listed(e.DTypes))
		}
		b.WriteString(")")
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// maxListed is how many argument shapes or dtypes an OpError's message lists;
// an Eval of a whole model's cache has hundreds, which bury the cause.
const maxListed = 8

// listed joins the first maxListed items and says how many were left out.
func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s, ... %d more of %d", strings.Join(items[:maxListed], ", "), len(items)-maxListed, len(items))
}

func (e *OpError) Unwrap() error { return e.Err }

// Errorf builds an OpError for op from its arguments and a message.
func Errorf(op string, args []Array, format string, a ...any) *OpError {
	e := &OpError{Op: op, Err: fmt.Errorf(format, a...)}
	for _, x := range args {
		if x == nil {
			e.Shapes = append(e.Shapes, "nil")
			e.DTypes = append(e.DTypes, "nil")
			continue
		}
		e.Shapes = append(e.Shapes, x.Shape().String())
		e.DTypes = append(e.DTypes, x.DType().String())
	}
	return e
}

// Recover, deferred with a pointer to the caller's error result, turns a panic
// carrying an *OpError into that error. Any other panic continues.
//
//	func (m *Model) Forward(...) (out backend.Array, err error) {
//		defer backend.Recover(&err)
//		...
//	}
func Recover(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if oe, ok := r.(*OpError); ok {
		*err = oe
		return
	}
	panic(r)
}
