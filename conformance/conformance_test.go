package conformance_test

import (
	"os"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	_ "github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/conformance"
)

// TestMain says loudly which backends this test binary runs, and which it
// cannot because they were not compiled in.
func TestMain(m *testing.M) {
	names := backend.Names()
	println("conformance: backends compiled in:", strings.Join(names, ", "))
	if !contains(names, "mlx") {
		println("conformance: *** mlx backend NOT compiled in: it is not being tested. Run `make test` or `go test -tags mlx ./conformance/` ***")
	}
	os.Exit(m.Run())
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestFixtures runs every fixture on every registered backend.
func TestFixtures(t *testing.T) {
	cases, err := conformance.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no fixtures in testdata/manifest.json")
	}
	for _, name := range backend.Names() {
		b, err := backend.Open(name, backend.Options{})
		if err != nil {
			t.Fatalf("open backend %s: %v", name, err)
		}
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.Name, func(t *testing.T) {
					for _, r := range conformance.Check(b, c) {
						if !r.Pass {
							t.Error(r.String())
						}
					}
				})
			}
		})
		if err := b.Close(); err != nil {
			t.Errorf("close backend %s: %v", name, err)
		}
	}
}
