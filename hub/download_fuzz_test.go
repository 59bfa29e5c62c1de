package hub

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzDownload answers Download with any revision listing, any ETag and
// X-Repo-Commit headers and any file body. Whatever the answers, nothing
// panics and nothing is written outside the cache directory; a download
// that succeeds returns a snapshot directory inside it.
func FuzzDownload(f *testing.F) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	listing := func(names ...string) string {
		var s []string
		for _, n := range names {
			s = append(s, `{"rfilename": "`+n+`"}`)
		}
		return `{"sha": "` + commit + `", "siblings": [` + strings.Join(s, ", ") + `]}`
	}
	etag := `"` + strings.Repeat("b", 40) + `"`
	// blobETag is the ETag the Hub gives a non-LFS file: its git blob sha1.
	blobETag := func(body string) string {
		return fmt.Sprintf(`"%x"`, sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", len(body), body))))
	}
	for _, c := range []struct{ listing, etag, repoCommit, body string }{
		{listing("config.json"), etag, commit, `{"a": 1}`},
		{listing("config.json", "sub/tokenizer.json"), etag, commit, `{}`},
		{listing("../evil.json"), etag, commit, `x`},
		{listing("a/../../evil.json"), etag, commit, `x`},
		{listing("config.json"), blobETag(`{"a": 1}`), commit, `{"a": 1}`},
		{listing("../../../../../evil.json"), blobETag("x"), commit, "x"},
		{listing("a/../../../../../../evil.json"), blobETag("x"), commit, "x"},
		{listing("config.json"), `"../../x"`, commit, `x`},
		{listing("model.safetensors"), `"` + strings.Repeat("a", 64) + `"`, commit, `x`},
		{`{"sha": "../../etc", "siblings": []}`, etag, commit, ``},
		{listing("config.json"), etag, strings.Repeat("f", 40), `x`},
	} {
		f.Add(c.listing, c.etag, c.repoCommit, c.body)
	}
	f.Fuzz(func(t *testing.T, listing, etag, repoCommit, body string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/api/models/") {
				w.Write([]byte(listing))
				return
			}
			h := w.Header()
			h.Set("X-Repo-Commit", repoCommit)
			h.Set("ETag", etag)
			if r.Method == http.MethodGet {
				w.Write([]byte(body))
			}
		}))
		defer srv.Close()
		root := t.TempDir()
		cache := filepath.Join(root, "a", "b", "c", "hub")
		c := &Client{Endpoint: srv.URL, Cache: cache, RetryWait: time.Millisecond}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dir, err := c.Download(ctx, "mlxgo-test/tiny", "main", []string{"*"})
		if err == nil && !inside(cache, dir) {
			t.Errorf("the snapshot %s is outside the cache %s", dir, cache)
		}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !inside(cache, p) && !inside(p, cache) {
				t.Errorf("%s written outside the cache %s", p, cache)
			}
			return nil
		})
	})
}

// inside reports whether p is dir or below it.
func inside(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
