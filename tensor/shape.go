package tensor

import "fmt"

// Shape is a tensor's dimensions, outermost first. An empty Shape is a scalar.
type Shape []int

// Size returns the number of elements: the product of the dimensions, 1 for a scalar.
func (s Shape) Size() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether s and o have the same dimensions (nil equals an empty Shape).
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// String formats s as "[2 3 4]" ("[]" for a scalar).
func (s Shape) String() string { return fmt.Sprint([]int(s)) }

// Clone returns a copy of s that shares no memory with it.
func (s Shape) Clone() Shape {
	if s == nil {
		return nil
	}
	return append(Shape{}, s...)
}
