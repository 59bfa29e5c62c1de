package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder stands in for a test and records how Missing ends it (the real
// Skip and Fatal stop the goroutine; these return).
type recorder struct {
	testing.TB
	skip, fatal string
}

func (r *recorder) Helper()        {}
func (r *recorder) Skip(a ...any)  { r.skip = a[0].(string) }
func (r *recorder) Fatal(a ...any) { r.fatal = a[0].(string) }

func TestRepoRoot(t *testing.T) {
	root := RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.Contains(string(b), "module github.com/mlxgo/mlxgo\n") {
		t.Fatalf("RepoRoot %s: go.mod %q, %v; want this module's", root, b, err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testenv", "testenv.go")); err != nil {
		t.Errorf("RepoRoot %s does not hold internal/testenv: %v", root, err)
	}
}

// Need passes a present path, and for an absent one skips (names the path,
// says how to make it) or, under MLXGO_REQUIRE_VENV=1, fails.
func TestNeed(t *testing.T) {
	absent := filepath.Join(t.TempDir(), "absent")
	for _, c := range []struct {
		env, path       string
		wantSkip, wantF bool
	}{
		{"", "testenv.go", false, false},
		{"1", "testenv.go", false, false},
		{"", absent, true, false},
		{"0", absent, true, false},
		{"1", absent, false, true},
	} {
		t.Run("env="+c.env+"/"+filepath.Base(c.path), func(t *testing.T) {
			t.Setenv("MLXGO_REQUIRE_VENV", c.env)
			r := &recorder{TB: t}
			Need(r, c.path, "make it")
			if (r.skip != "") != c.wantSkip || (r.fatal != "") != c.wantF {
				t.Fatalf("skip %q, fatal %q; want skip %v, fatal %v", r.skip, r.fatal, c.wantSkip, c.wantF)
			}
			for _, msg := range []string{r.skip, r.fatal} {
				if msg != "" && (!strings.Contains(msg, c.path) || !strings.Contains(msg, "make it")) {
					t.Errorf("message %q does not name %s and how to make it", msg, c.path)
				}
			}
		})
	}
}

// SmolLM2GGUF takes $MLXGO_SMOLLM2_GGUF when it names a file.
func TestSmolLM2GGUFEnv(t *testing.T) {
	t.Setenv("MLXGO_SMOLLM2_GGUF", filepath.Join(RepoRoot(t), "go.mod"))
	if got, want := SmolLM2GGUF(t), filepath.Join(RepoRoot(t), "go.mod"); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
