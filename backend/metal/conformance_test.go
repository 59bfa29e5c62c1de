//go:build mlx

package metal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/tensor"
)

const fixtures = "../../conformance/testdata"

// recorder is the backend under test with every ToHost result kept, so the
// test can hold the outputs conformance.Check computed to the oracle's bytes.
type recorder struct {
	*Backend
	got []*tensor.Dense
}

func (r *recorder) ToHost(a backend.Array) (*tensor.Dense, error) {
	t, err := r.Backend.ToHost(a)
	if err == nil {
		r.got = append(r.got, t)
	}
	return t, err
}

// opCases loads every op fixture: from manifest.json when there is one, else
// every ops/*.json.
func opCases(t *testing.T) []*conformance.Case {
	t.Helper()
	var cases []*conformance.Case
	if _, err := os.Stat(filepath.Join(fixtures, "manifest.json")); err == nil {
		all, err := conformance.Load(fixtures)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range all {
			if c.Kind == "op" {
				cases = append(cases, c)
			}
		}
	} else {
		paths, err := filepath.Glob(filepath.Join(fixtures, "ops", "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(paths)
		for _, p := range paths {
			c, err := conformance.LoadCase(p)
			if err != nil {
				t.Fatal(err)
			}
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		t.Fatalf("no op fixtures under %s: generate them with `make oracle`", fixtures)
	}
	return cases
}

// hostSide are the fixture ops mlxgo computes on the host whichever backend
// is open (package generate: sampling transforms, random numbers; the
// TurboQuant codec of nn/turboquant, whose codes, scales and packed bytes
// never pass through a backend op). Check still holds them to the oracle
// (the codec exactly); they are not backend results to compare.
var hostSide = map[string]bool{
	"apply_top_p": true, "apply_min_p": true, "apply_top_k": true, "temperature": true,
	"repetition_penalty": true, "categorical": true, "categorical_sampling": true,
	"make_sampler": true, "random_key": true, "random_split": true, "random_uniform": true,
	"turboquant": true,
}

// TestOpFixtures runs every op fixture through conformance.Check on MLX's
// CPU device, and requires more than the tolerance: the oracle ran the same
// libmlx on the same CPU, so each out.* must come back byte for byte (each
// matched to a distinct ToHost result).
func TestOpFixtures(t *testing.T) {
	cases := opCases(t)
	b, err := New(backend.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := &recorder{Backend: b}
	identical, backendCases := 0, 0
	for _, c := range cases {
		if !hostSide[c.Op] {
			backendCases++
		}
		t.Run(c.Name, func(t *testing.T) {
			r.got = nil
			for _, res := range conformance.Check(r, c) {
				if !res.Pass {
					t.Error(res.String())
				}
			}
			if hostSide[c.Op] || !b.OracleExact() {
				return
			}
			if err := sameBits(c, r.got); err != nil {
				t.Errorf("not bit-identical to the oracle: %v", err)
				return
			}
			identical++
		})
	}
	if !b.OracleExact() {
		t.Logf("MLX's CPU device on %s/%s is not where the fixtures are made: every case held to the tolerance table, none to the oracle's bits", runtime.GOOS, runtime.GOARCH)
	} else {
		t.Logf("%d of %d backend op fixtures bit-identical to the oracle (%d host-side cases checked by tolerance only)",
			identical, backendCases, len(cases)-backendCases)
	}
	if s := b.Stats(); s.LiveArrays != 0 {
		t.Errorf("got %d live arrays after all cases, want 0 (Check's scopes free everything)", s.LiveArrays)
	}
}

// sameBits matches every output of c to a distinct recorded tensor with the
// same dtype, shape and bytes.
func sameBits(c *conformance.Case, got []*tensor.Dense) error {
	arrs, err := c.OpenArrays()
	if err != nil {
		return err
	}
	defer arrs.Close()
	used := make([]bool, len(got))
	for _, name := range c.Outputs {
		want, err := arrs.Output(name)
		if err != nil {
			return err
		}
		found := false
		for i, g := range got {
			if !used[i] && g.DType == want.DType && g.Shape.Equal(want.Shape) && bytes.Equal(g.Data, want.Data) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			return fmt.Errorf("output %q (%v %v): no result with the same bytes among %d", name, want.DType, want.Shape, len(got))
		}
	}
	return nil
}
