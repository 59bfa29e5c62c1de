// Package conformance holds every backend to the oracle, Python mlx_lm.
//
// The fixtures under testdata/ are written only by the oracle generator
// (conformance/oracle, run by `make oracle`); their format is documented in
// conformance/README.md so that fixtures made elsewhere run too.
//
// The package is a library first: [Load] reads the fixtures, [Check] runs one
// case on one backend and returns [Result]s that name the case, the backend,
// the metric, the worst element's index and both values. `go test` and
// `mlxgo conform` share it. Tolerances live in one table (tolerance.go, looked
// up with [BudgetFor]), each number with the reason for it and what was
// measured against it; package debug (`mlxgo diff`) and the model tests read
// their bounds from it too.
package conformance
