package conformance

import (
	"reflect"

	"github.com/mlxgo/mlxgo/backend"
)

// OpInterfaces are the interfaces of backend.Backend whose every method must
// be exercised by at least one op fixture.
var OpInterfaces = []reflect.Type{
	reflect.TypeFor[backend.Elementwise](),
	reflect.TypeFor[backend.Shaping](),
	reflect.TypeFor[backend.Reducing](),
	reflect.TypeFor[backend.Linalg](),
	reflect.TypeFor[backend.Fused](),
	reflect.TypeFor[backend.Quantized](),
}

// memoryOps are the methods of backend.Memory that compute array contents
// (the rest move, evaluate or free arrays).
var memoryOps = []string{"Zeros", "Full"}

// MethodCoverage is how many op cases exercise one backend method.
type MethodCoverage struct {
	Interface string    `json:"interface"` // "Elementwise", ...
	Method    string    `json:"method"`    // "Binary", ...
	Ops       []OpCount `json:"ops"`       // its fixture ops (MethodOps), each with its case count
	Cases     int       `json:"cases"`     // the sum of Ops' counts
}

// OpCount is the number of cases of one op.
type OpCount struct {
	Op    string `json:"op"`
	Cases int    `json:"cases"`
}

// Coverage counts, for every method of OpInterfaces and Memory's Zeros and
// Full (interfaces in OpInterfaces order, methods by name), the op cases
// (kind "op") among cases of each of its ops. A method with no entry in
// MethodOps comes back with no ops.
func Coverage(cases []*Case) []MethodCoverage {
	count := map[string]int{}
	for _, c := range cases {
		if c.Kind == "op" {
			count[c.Op]++
		}
	}
	var out []MethodCoverage
	add := func(iface, method string) {
		m := MethodCoverage{Interface: iface, Method: method, Ops: []OpCount{}}
		for _, op := range MethodOps[method] {
			m.Ops = append(m.Ops, OpCount{Op: op, Cases: count[op]})
			m.Cases += count[op]
		}
		out = append(out, m)
	}
	for _, t := range OpInterfaces {
		for i := range t.NumMethod() {
			add(t.Name(), t.Method(i).Name)
		}
	}
	for _, m := range memoryOps {
		add("Memory", m)
	}
	return out
}
