package minicpm5

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/internal/testenv"
)

// The oracle's model fixtures themselves are run by conformance (its
// TestFixtures, TestFastPrecision and TestUnquantizedTokens, under the one
// tolerance table, conformance/tolerance.go); the tests here use the fixture
// checkpoints as models.

// fixtureRoot holds the oracle's tiny checkpoints (conformance/README.md).
// MLXGO_MODEL_FIXTURES points elsewhere (the models/ directory of fixtures
// generated with conformance/oracle/generate.py --only models --out DIR).
var fixtureRoot = func() string {
	if d := os.Getenv("MLXGO_MODEL_FIXTURES"); d != "" {
		return d
	}
	return "../../conformance/testdata/models"
}()

// checkpoints lists the fixture checkpoint directories, or skips (fails with
// MLXGO_REQUIRE_VENV=1, as under `make test`) when there are none.
func checkpoints(t *testing.T) []string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(fixtureRoot, "*", "config.json"))
	if len(dirs) == 0 {
		testenv.Missing(t, "no fixture checkpoints under "+fixtureRoot+" (run `make oracle`); the model is not checked against mlx_lm")
	}
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	sort.Strings(dirs)
	return dirs
}

func newCPU(t *testing.T) backend.Backend {
	t.Helper()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func load(t *testing.T, b backend.Backend, dir string) *Model {
	t.Helper()
	m, err := Load(b, dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func host(t *testing.T, b backend.Backend, x backend.Array) []float32 {
	t.Helper()
	d, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToFloat32()
}

// argmax returns the index of the largest value (ties to the smaller) and
// the gap to the second largest.
func argmax(row []float32) (int, float64) {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	second := math.Inf(-1)
	for i, v := range row {
		if i != best {
			second = math.Max(second, float64(v))
		}
	}
	return best, float64(row[best]) - second
}
