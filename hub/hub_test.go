package hub

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/hub/hubtest"
	"github.com/mlxgo/mlxgo/internal/testenv"
)

const repo = "mlxgo-test/tiny"

// tinyFiles is a repo holding the tied-f32 fixture checkpoint, a small
// tokenizer file, a nested JSON file and files mlx_lm does not fetch.
func tinyFiles(t *testing.T) map[string][]byte {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "models", "tied-f32")
	files := map[string][]byte{
		"tokenizer_config.json": []byte(`{"model_max_length": 64}`),
		"sub/extra.json":        []byte(`{"nested": true}`),
		"README.md":             []byte("# tiny\n"),
		".gitattributes":        []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n"),
		"convert.py":            []byte("print('remote code')\n"),
		"original/params.pth":   []byte("pickle"),
	}
	for _, f := range []string{"config.json", "model.safetensors", "model.safetensors.index.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = b
	}
	return files
}

// wantFiles are the tiny repo's files DefaultAllowPatterns keeps.
var wantFiles = []string{"config.json", "model.safetensors", "model.safetensors.index.json", "sub/extra.json", "tokenizer_config.json"}

func newClient(s *hubtest.Server, cache string) *Client {
	return &Client{Endpoint: s.Hub.URL, Cache: cache}
}

func pull(t *testing.T, c *Client, rev string, patterns []string) string {
	t.Helper()
	snap, err := c.Download(context.Background(), repo, rev, patterns)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// count returns how many recorded requests have host and method (and a
// path ending in suffix when given).
func count(reqs []hubtest.Request, host, method, suffix string) int {
	n := 0
	for _, r := range reqs {
		if r.Host == host && r.Method == method && strings.HasSuffix(r.Path, suffix) {
			n++
		}
	}
	return n
}

// snapshotFiles lists the files under snap (links included), slash-separated.
func snapshotFiles(t *testing.T, snap string) []string {
	t.Helper()
	var got []string
	err := filepath.Walk(snap, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			rel, _ := filepath.Rel(snap, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

// TestPullLayout checks a fresh pull's cache, entry by entry, against
// huggingface_hub's layout, and the requests it took.
func TestPullLayout(t *testing.T) {
	s := hubtest.New(t)
	files := tinyFiles(t)
	commit := s.Commit(repo, "main", files)
	cache := t.TempDir()
	c := newClient(s, cache)
	var log bytes.Buffer
	c.Progress = &log
	snap := pull(t, c, "", nil)

	root := filepath.Join(cache, "models--mlxgo-test--tiny")
	if want := filepath.Join(root, "snapshots", commit); snap != want {
		t.Fatalf("snapshot %s, want %s", snap, want)
	}
	if got := snapshotFiles(t, snap); !slices.Equal(got, wantFiles) {
		t.Errorf("snapshot files %q, want %q (README.md, .gitattributes, *.py, *.pth left out)", got, wantFiles)
	}
	var blobs []string
	for _, f := range wantFiles {
		etag := hubtest.ETag(f, files[f])
		blobs = append(blobs, etag)
		link, err := os.Readlink(filepath.Join(snap, filepath.FromSlash(f)))
		want := strings.Repeat("../", 2+strings.Count(f, "/")) + "blobs/" + etag
		if err != nil || link != filepath.FromSlash(want) {
			t.Errorf("%s: link %q, %v; want the relative link %q", f, link, err, want)
		}
		b, err := os.ReadFile(filepath.Join(root, "blobs", etag))
		if err != nil || !bytes.Equal(b, files[f]) {
			t.Errorf("%s: blob %s holds %d bytes (%v), want the file's %d", f, etag, len(b), err, len(files[f]))
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, "blobs"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(blobs)
	if !slices.Equal(names, blobs) {
		t.Errorf("blobs/ holds %q, want exactly %q (no .incomplete left)", names, blobs)
	}
	if b, err := os.ReadFile(filepath.Join(root, "refs", "main")); err != nil || string(b) != commit {
		t.Errorf("refs/main %q, %v; want %q with no newline", b, err, commit)
	}
	if b, err := os.ReadFile(filepath.Join(cache, "CACHEDIR.TAG")); err != nil || !strings.HasPrefix(string(b), "Signature: 8a477f597d28d172789f06886806bc55\n") {
		t.Errorf("CACHEDIR.TAG %q, %v", b, err)
	}
	lfsEtag := hubtest.ETag("model.safetensors", files["model.safetensors"])
	if _, err := os.Stat(filepath.Join(cache, ".locks", "models--mlxgo-test--tiny", lfsEtag+".lock")); err != nil {
		t.Errorf("no lock file: %v", err)
	}

	reqs := s.Requests()
	if n := count(reqs, "hub", "GET", "/api/models/mlxgo-test/tiny/revision/main"); n != 1 {
		t.Errorf("%d revision listings, want 1", n)
	}
	if n := count(reqs, "hub", "HEAD", ""); n != len(wantFiles) {
		t.Errorf("%d HEADs, want one per file (%d)", n, len(wantFiles))
	}
	if n := count(reqs, "storage", "GET", "/lfs/"+lfsEtag); n != 1 {
		t.Errorf("%d GETs of model.safetensors from the storage host, want 1 (the LFS redirect followed)", n)
	}
	if n := count(reqs, "hub", "GET", "/resolve/"+commit+"/model.safetensors"); n != 0 {
		t.Errorf("%d GETs of model.safetensors from the Hub, want 0 (the HEAD's redirect is used)", n)
	}
	if n := count(reqs, "hub", "GET", "/resolve/"+commit+"/sub/extra.json"); n != 1 {
		t.Errorf("%d GETs of sub/extra.json, want 1", n)
	}
	if c.Stats.Fetched != len(wantFiles) || c.Stats.Reused != 0 {
		t.Errorf("stats %+v, want %d fetched, none reused", c.Stats, len(wantFiles))
	}
	if out := log.String(); strings.Count(out, "downloaded") != len(wantFiles) || !strings.Contains(out, "[2/5] model.safetensors: 644.0 kB downloaded") {
		t.Errorf("progress lines:\n%s\nwant one per file, e.g. [2/5] model.safetensors: 644.0 kB downloaded", out)
	}

	// A second pull asks for the listing only.
	s.Reset()
	c.Stats = Stats{}
	if again := pull(t, c, "", nil); again != snap {
		t.Errorf("second pull gave %s, want %s", again, snap)
	}
	if reqs := s.Requests(); len(reqs) != 1 || reqs[0].Method != "GET" || !strings.HasSuffix(reqs[0].Path, "/revision/main") {
		t.Errorf("second pull sent %+v, want the revision listing only", reqs)
	}
	if c.Stats.Fetched != 0 || c.Stats.Reused != len(wantFiles) {
		t.Errorf("second pull stats %+v, want nothing fetched", c.Stats)
	}
}

// TestPullRevision pulls a branch, a commit hash and a missing revision;
// a blob two commits share is downloaded once.
func TestPullRevision(t *testing.T) {
	s := hubtest.New(t)
	files := tinyFiles(t)
	mainCommit := s.Commit(repo, "main", files)
	v2 := map[string][]byte{}
	for k, v := range files {
		v2[k] = v
	}
	v2["config.json"] = append(bytes.TrimSpace(files["config.json"]), ' ') // a changed config, same weights
	v2Commit := s.Commit(repo, "refs/pr/1", v2)
	cache := t.TempDir()
	root := filepath.Join(cache, "models--mlxgo-test--tiny")
	c := newClient(s, cache)

	snap := pull(t, c, "refs/pr/1", nil)
	if want := filepath.Join(root, "snapshots", v2Commit); snap != want {
		t.Errorf("snapshot %s, want %s", snap, want)
	}
	if b, err := os.ReadFile(filepath.Join(root, "refs", "refs", "pr", "1")); err != nil || string(b) != v2Commit {
		t.Errorf("refs/refs/pr/1 %q, %v; want %s", b, err, v2Commit)
	}
	if _, err := os.Stat(filepath.Join(root, "refs", "main")); err == nil {
		t.Errorf("refs/main written for a pull of refs/pr/1")
	}
	if n := count(s.Requests(), "hub", "GET", "/revision/refs%2Fpr%2F1"); n != 1 {
		t.Errorf("the revision was not asked for path-escaped: %+v", s.Requests())
	}

	// By commit hash: no ref; the shared weights are not downloaded again.
	s.Reset()
	c.Stats = Stats{}
	snap = pull(t, c, mainCommit, nil)
	if want := filepath.Join(root, "snapshots", mainCommit); snap != want {
		t.Errorf("snapshot %s, want %s", snap, want)
	}
	if _, err := os.Stat(filepath.Join(root, "refs", mainCommit)); err == nil {
		t.Errorf("a ref was written for a commit hash")
	}
	if n := count(s.Requests(), "storage", "GET", ""); n != 0 {
		t.Errorf("model.safetensors downloaded again (%d GETs), its blob was cached", n)
	}
	if c.Stats.Fetched != 1 || c.Stats.Reused != len(wantFiles)-1 {
		t.Errorf("stats %+v, want only config.json fetched", c.Stats)
	}

	_, err := c.Download(context.Background(), repo, "nope", nil)
	wantErr(t, err, "mlxgo-test/tiny@nope", "404", `no revision "nope"`)
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func TestPullAllowPatterns(t *testing.T) {
	s := hubtest.New(t)
	s.Commit(repo, "main", tinyFiles(t))
	c := newClient(s, t.TempDir())
	for _, tc := range []struct {
		patterns, want []string
	}{
		{[]string{"config.json", "*.safetensors"}, []string{"config.json", "model.safetensors"}},
		{[]string{"sub/"}, []string{"sub/extra.json"}},
		{[]string{"*.md", "[!a-z]*"}, []string{".gitattributes", "README.md"}},
		{[]string{"*.py"}, []string{"convert.py"}},
	} {
		t.Run(strings.Join(tc.patterns, ","), func(t *testing.T) {
			c.Cache = t.TempDir()
			snap := pull(t, c, "", tc.patterns)
			if got := snapshotFiles(t, snap); !slices.Equal(got, tc.want) {
				t.Errorf("files %q, want %q", got, tc.want)
			}
		})
	}
	_, err := c.Download(context.Background(), repo, "", []string{"*.gguf"})
	wantErr(t, err, "none of its 9 files", "*.gguf")
}

// TestPullResume drops the connection mid-file: within one pull the
// download continues with a Range request; when the host keeps failing the
// pull stops, keeps the .incomplete file, and the next pull resumes it.
func TestPullResume(t *testing.T) {
	s := hubtest.New(t)
	files := tinyFiles(t)
	s.Commit(repo, "main", files)
	weights := files["model.safetensors"]
	etag := hubtest.ETag("model.safetensors", weights)

	t.Run("within-a-pull", func(t *testing.T) {
		cache := t.TempDir()
		cuts := 0
		s.Cut = func(path string, start int64) int64 {
			if path == "model.safetensors" && start == 0 {
				cuts++
				return 100_000
			}
			return -1
		}
		defer func() { s.Cut = nil }()
		s.Reset()
		c := newClient(s, cache)
		snap := pull(t, c, "", nil)
		if b, err := os.ReadFile(filepath.Join(snap, "model.safetensors")); err != nil || !bytes.Equal(b, weights) {
			t.Fatalf("model.safetensors: %d bytes, %v; want the %d bytes", len(b), err, len(weights))
		}
		var ranges []string
		for _, r := range s.Requests() {
			if r.Host == "storage" {
				ranges = append(ranges, r.Range)
			}
		}
		if cuts != 1 || !slices.Equal(ranges, []string{"", "bytes=100000-"}) {
			t.Errorf("storage GETs with ranges %q after %d cuts, want one plain GET cut off, then bytes=100000-", ranges, cuts)
		}
	})

	t.Run("across-pulls", func(t *testing.T) {
		cache := t.TempDir()
		s.Cut = func(path string, start int64) int64 {
			if path == "model.safetensors" {
				return 250_000
			}
			return -1
		}
		s.Status = func(path string, start int64) int {
			if path == "model.safetensors" && start > 0 {
				return 503
			}
			return 0
		}
		defer func() { s.Cut, s.Status = nil, nil }()
		c := newClient(s, cache)
		_, err := c.Download(context.Background(), repo, "", nil)
		inc := filepath.Join(cache, "models--mlxgo-test--tiny", "blobs", etag+".incomplete")
		wantErr(t, err, "model.safetensors", "gave up after 6 failures", "503", inc, "250000 bytes received", "run again to resume")
		if st, err := os.Stat(inc); err != nil || st.Size() != 250_000 {
			t.Fatalf(".incomplete after the failed pull: %v, %v; want 250000 bytes kept", st, err)
		}
		s.Cut, s.Status = nil, nil
		s.Reset()
		c.Stats = Stats{}
		snap := pull(t, c, "", nil)
		if b, err := os.ReadFile(filepath.Join(snap, "model.safetensors")); err != nil || !bytes.Equal(b, weights) {
			t.Fatalf("model.safetensors after the resume: %d bytes, %v", len(b), err)
		}
		var ranges []string
		for _, r := range s.Requests() {
			if r.Host == "storage" {
				ranges = append(ranges, r.Range)
			}
		}
		if !slices.Equal(ranges, []string{"bytes=250000-"}) || c.Stats.Resumed != 1 {
			t.Errorf("resume: storage ranges %q, %d resumed; want one GET of bytes=250000-", ranges, c.Stats.Resumed)
		}
		if _, err := os.Stat(inc); err == nil {
			t.Errorf("%s left after the resumed download", inc)
		}
	})

	t.Run("truncated", func(t *testing.T) {
		cache := t.TempDir()
		s.Cut = func(string, int64) int64 { return 0 }
		defer func() { s.Cut = nil }()
		_, err := newClient(s, cache).Download(context.Background(), repo, "", nil)
		wantErr(t, err, "mlxgo-test/tiny@", "config.json", "gave up after 6 failures in a row at byte 0 of 544 B", "unexpected EOF")
	})
}

// TestPullCorrupt serves bytes that do not match the ETag: the pull fails
// naming the file and both hashes, and keeps nothing of it.
func TestPullCorrupt(t *testing.T) {
	files := tinyFiles(t)
	for _, tc := range []struct{ file, kind string }{
		{"model.safetensors", "sha256"},
		{"config.json", "git blob sha1"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := hubtest.New(t)
			s.Commit(repo, "main", files)
			s.Body = func(path string, data []byte) []byte {
				if path != tc.file {
					return data
				}
				bad := bytes.Clone(data)
				bad[len(bad)/2] ^= 1
				return bad
			}
			cache := t.TempDir()
			_, err := newClient(s, cache).Download(context.Background(), repo, "", nil)
			etag := hubtest.ETag(tc.file, files[tc.file])
			wantErr(t, err, tc.file, "the "+tc.kind+" of the downloaded bytes", "the Hub's ETag says "+etag, "corrupt", "removed")
			blobs := filepath.Join(cache, "models--mlxgo-test--tiny", "blobs")
			for _, name := range []string{etag, etag + ".incomplete"} {
				if _, err := os.Stat(filepath.Join(blobs, name)); err == nil {
					t.Errorf("%s kept after a corrupt download", name)
				}
			}
		})
	}
}

// TestPullToken sends HF_TOKEN to the Hub and never to the storage host.
func TestPullToken(t *testing.T) {
	s := hubtest.New(t)
	s.Commit(repo, "main", tinyFiles(t))
	s.Token = "hf_secret"
	t.Setenv("HF_ENDPOINT", s.Hub.URL+"/")
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "absent"))

	c, err := NewClient()
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Download(context.Background(), repo, "", nil)
	wantErr(t, err, "mlxgo-test/tiny@main", "401", "set HF_TOKEN", "Invalid username or password.")

	t.Setenv("HF_TOKEN", "hf_secret")
	if c, err = NewClient(); err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != s.Hub.URL {
		t.Errorf("endpoint %q, want HF_ENDPOINT without its trailing slash %q", c.Endpoint, s.Hub.URL)
	}
	s.Reset()
	if _, err := c.Download(context.Background(), repo, "", nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Requests() {
		want := map[string]string{"hub": "Bearer hf_secret", "storage": ""}[r.Host]
		if r.Auth != want {
			t.Errorf("%s %s %s: Authorization %q, want %q", r.Host, r.Method, r.Path, r.Auth, want)
		}
	}

	// A token file stands in for HF_TOKEN, as huggingface_hub's stored login.
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte("hf_secret\n"), 0o600)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", tokFile)
	if c, err = NewClient(); err != nil || c.Token != "hf_secret" {
		t.Errorf("token from %s: %q, %v", tokFile, c.Token, err)
	}
}

func TestNewClientBadEndpoint(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_ENDPOINT", "ftp://mirror")
	_, err := NewClient()
	wantErr(t, err, `HF_ENDPOINT "ftp://mirror"`, "http(s) URL")
}

// TestProgressBar draws a bar as a terminal shows it.
func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, true, repo, 2)
	p.begin(1, "model.safetensors", 2000, 500)
	p.drawn = p.drawn.Add(-time.Second) // let the next add redraw
	p.add(1500)
	p.done()
	out := b.String()
	for _, want := range []string{
		"\r\x1b[K[2/2] model.safetensors  25% |######                  | 500 B / 2.0 kB",
		"\r\x1b[K[2/2] model.safetensors 100% |########################| 2.0 kB / 2.0 kB",
		"\r\x1b[K[2/2] model.safetensors: 2.0 kB (resumed at 500 B) in ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output %q does not contain %q", out, want)
		}
	}
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("bar output %q: want one line ended once", out)
	}
}
