package server_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/server"
)

// withCacheDir gives a fixture's server a prefix cache of limit bytes kept
// in dir, and keeps its configuration in *cfg.
func withCacheDir(t *testing.T, dir string, limit int64, cfg *server.Config) func(*server.Config) {
	return func(c *server.Config) {
		m := c.Model.(*minicpm5.Model)
		dts, err := m.CacheDTypes()
		if err != nil {
			t.Fatal(err)
		}
		c.PromptCacheBytes, c.PromptCacheDir, c.PromptCacheShape = limit, dir, promptcache.ModelShape(m.Config(), dts)
		*cfg = *c
	}
}

// cacheFiles reads the prompt cache files of dir.
func cacheFiles(t *testing.T, dir string) []*promptcache.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*promptcache.File
	for _, n := range names {
		f, err := promptcache.Read(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// TestPromptCacheDir: with a prompt cache directory, the prefix cache's
// entries are saved there as prompt cache files when evicted and when the
// server closes (mlx_lm's format, the model's id and the tokens in the
// metadata); a server started on that directory loads them, so a prompt
// sharing their tokens is prefilled from them (cached_tokens) and still
// answers what the oracle gives; a server of another model refuses the
// files (server.ErrOtherModel, naming the file).
func TestPromptCacheDir(t *testing.T) {
	dir := t.TempDir()
	var cfg server.Config
	f := newFixture(t, withCacheDir(t, dir, 1<<20, &cfg))
	prompt := []int32{5, 6, 7, 8, 9, 10}
	text, toks, _ := f.want(prompt, generate.Options{MaxTokens: 4})
	body := `{"prompt": [5, 6, 7, 8, 9, 10], "max_tokens": 4}`
	_, got, _ := f.post("/v1/completions", body)
	if get(got, "choices", 0, "text") != text || get(got, "usage", "prompt_tokens_details", "cached_tokens") != 0.0 {
		t.Fatalf("first request: %v, want text %q and no cached tokens", got, text)
	}
	if n := len(cacheFiles(t, dir)); n != 0 {
		t.Fatalf("%d files in the cache directory before any eviction or shutdown", n)
	}
	size := f.waitIdle().PromptCacheBytes
	f.srv.Close()
	files := cacheFiles(t, dir)
	held := append(slices.Clone(prompt), toks...)
	if len(files) != 1 || files[0].Metadata["model"] != "tiny" || files[0].Tokens() != len(held) || files[0].Metadata["tokens"] != strings.Trim(strings.Join(strings.Fields(fmt.Sprint(held)), ","), "[]") {
		t.Fatalf("after Close: %d files, want 1 with model tiny and the %d tokens %v", len(files), len(held), held)
	}

	// A new server loads the file: the same prompt reuses all but its last token.
	f = newFixture(t, withCacheDir(t, dir, 1<<20, &cfg))
	if m := f.waitIdle(); m.PromptCacheSeqs != 1 || m.PromptCacheBytes != size {
		t.Errorf("loaded prompt cache: %d sequences, %d bytes; want 1 of %d bytes", m.PromptCacheSeqs, m.PromptCacheBytes, size)
	}
	_, got, _ = f.post("/v1/completions", body)
	if get(got, "choices", 0, "text") != text || get(got, "usage", "prompt_tokens_details", "cached_tokens") != float64(len(prompt)-1) {
		t.Errorf("after the restart: %v, want text %q and %d cached tokens", got, text, len(prompt)-1)
	}

	// Another model's server refuses the directory's files.
	other := cfg
	other.ModelID = "other"
	if _, err := server.New(other); !errors.Is(err, server.ErrOtherModel) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), `"tiny"`) {
		t.Errorf("a server of another model on the directory: %v; want ErrOtherModel naming the file and the model tiny", err)
	}
	f.srv.Close()

	// Eviction: with room for one entry, a second evicts (and saves) the first.
	dir2 := t.TempDir()
	f = newFixture(t, withCacheDir(t, dir2, size*3/2, &cfg))
	f.post("/v1/completions", body)
	f.post("/v1/completions", `{"prompt": [40, 41, 42, 43, 44, 45], "max_tokens": 4}`)
	f.waitIdle()
	files = cacheFiles(t, dir2)
	if len(files) != 1 || !strings.HasPrefix(files[0].Metadata["tokens"], "5,6,7,8,9,10,") {
		t.Errorf("after an eviction: %d files, want 1 holding the evicted prompt 5,...,10", len(files))
	}
	f.checkIdle()
}
