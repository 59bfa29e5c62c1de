package hub

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPullBadServer answers with what a broken or hostile server might
// send and wants a clear error naming what was wrong, with nothing
// allocated or created from the bad values.
func TestPullBadServer(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	body := `{"a": 1}`
	goodListing := `{"sha": "` + commit + `", "siblings": [{"rfilename": "config.json"}]}`
	for _, tc := range []struct {
		name    string
		listing string            // the revision API's body ("" for goodListing)
		status  int               // the revision API's status (0: 200)
		head    map[string]string // headers of the HEAD answer (X-Repo-Commit and ETag added unless set to "-")
		get     string            // the GET body ("" for body)
		errs    []string
	}{
		{name: "listing-not-json", listing: "<html>", errs: []string{"did not answer a revision listing"}},
		{name: "listing-bad-sha", listing: `{"sha": "../../etc", "siblings": []}`, errs: []string{`gave the commit "../../etc", want 40 hex digits`}},
		{name: "listing-escaping-path", listing: `{"sha": "` + commit + `", "siblings": [{"rfilename": "../evil.json"}]}`, errs: []string{`"../evil.json"`, "not a relative path inside the repo"}},
		{name: "listing-absolute-path", listing: `{"sha": "` + commit + `", "siblings": [{"rfilename": "/etc/x.json"}]}`, errs: []string{`"/etc/x.json"`, "not a relative path"}},
		{name: "listing-500", status: 500, errs: []string{"mlxgo-test/tiny@main", "500 Internal Server Error"}},
		{name: "no-repo-commit", head: map[string]string{"X-Repo-Commit": "-"}, errs: []string{"config.json", "without an X-Repo-Commit header", "HF_ENDPOINT"}},
		{name: "other-commit", head: map[string]string{"X-Repo-Commit": strings.Repeat("f", 40)}, errs: []string{"answered for the commit"}},
		{name: "no-etag", head: map[string]string{"ETag": "-"}, errs: []string{"gave no ETag"}},
		{name: "etag-path", head: map[string]string{"ETag": `"../../x"`}, errs: []string{`ETag "../../x", not usable as a blob name`}},
		{name: "huge-size", head: map[string]string{"X-Linked-Size": "60000000000", "X-Linked-Etag": `"` + strings.Repeat("a", 64) + `"`}, errs: []string{"announced 60000000000 bytes", "50 GB"}},
		{name: "overflowing-size", head: map[string]string{"X-Linked-Size": "99999999999999999999"}, errs: []string{`gave the size "99999999999999999999"`}},
		{name: "negative-size", head: map[string]string{"X-Linked-Size": "-1"}, errs: []string{`gave the size "-1"`}},
		{name: "longer-body", get: body + "more", errs: []string{"sent more than the 8 bytes announced"}},
		{name: "shorter-body-retried", get: body[:3], errs: []string{"gave up after 6 failures", "byte 3 of 8 B", "ended the body at byte 3 of 8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/api/models/") {
					if tc.status != 0 {
						w.WriteHeader(tc.status)
						return
					}
					w.Write([]byte(cmpOr(tc.listing, goodListing)))
					return
				}
				h := w.Header()
				h.Set("X-Repo-Commit", commit)
				h.Set("ETag", `"`+strings.Repeat("b", 40)+`"`)
				for k, v := range tc.head {
					if v == "-" {
						h.Del(k)
					} else {
						h.Set(k, v)
					}
				}
				if _, ok := tc.head["X-Linked-Size"]; !ok {
					h.Set("Content-Length", "8")
				}
				if r.Method == http.MethodGet {
					b := cmpOr(tc.get, body)
					h.Del("Content-Length") // the body as it is, chunked
					w.Write([]byte(b))
				}
			}))
			defer srv.Close()
			cache := t.TempDir()
			c := &Client{Endpoint: srv.URL, Cache: cache}
			_, err := c.Download(context.Background(), repo, "", nil)
			wantErr(t, err, tc.errs...)
		})
	}
	for _, id := range []string{"noslash", "a/b/c", "-org/name", "org/name-", "org/na..me", "org--x/name", "org/name.git", "org/" + strings.Repeat("n", 97), "org/na me"} {
		_, err := (&Client{Endpoint: "http://127.0.0.1:1", Cache: t.TempDir()}).Download(context.Background(), id, "", nil)
		wantErr(t, err, "repo id "+`"`+id+`"`)
	}
	for _, rev := range []string{"../x", "/main", "a//b", `a\b`} {
		_, err := (&Client{Endpoint: "http://127.0.0.1:1", Cache: t.TempDir()}).Download(context.Background(), repo, rev, nil)
		wantErr(t, err, "revision", "want a branch, tag or commit hash")
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestCheckSpace(t *testing.T) {
	dir := t.TempDir()
	if err := checkSpace(dir, 1); err != nil {
		t.Errorf("1 byte: %v", err)
	}
	err := checkSpace(dir, math.MaxInt64)
	wantErr(t, err, "not enough disk space in "+dir, "9223372036854775807 more bytes")
}

func TestNormalizeETag(t *testing.T) {
	for in, want := range map[string]string{
		`"abc"`:   "abc",
		`W/"abc"`: "abc",
		`abc`:     "abc",
		`"Wabc"`:  "Wabc",
		`Wabc`:    "abc", // Python's lstrip("W/") drops every leading W and /
		`//W"x"`:  "x",
		``:        "",
	} {
		if got := normalizeETag(in); got != want {
			t.Errorf("normalizeETag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContentRange(t *testing.T) {
	for _, tc := range []struct {
		in           string
		start, total int64
		ok           bool
	}{
		{"bytes 100-199/200", 100, 200, true},
		{"bytes 0-0/*", 0, -1, true},
		{"bytes -1-5/9", 0, 0, false},
		{"100-199/200", 0, 0, false},
		{"bytes 100-199/x", 0, 0, false},
		{"bytes 100/200", 0, 0, false},
	} {
		s, n, ok := contentRange(tc.in)
		if s != tc.start || n != tc.total || ok != tc.ok {
			t.Errorf("contentRange(%q) = %d, %d, %v; want %d, %d, %v", tc.in, s, n, ok, tc.start, tc.total, tc.ok)
		}
	}
}

// TestPullStall drops a body that stops arriving for Stall and resumes it
// with Range; one that never resumes ends in an error saying so.
func TestPullStall(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	data := []byte(strings.Repeat("x", 1000))
	for _, tc := range []struct {
		name     string
		stallAll bool
		errs     []string
	}{
		{"once", false, nil},
		{"always", true, []string{"gave up after 6 failures", "no byte received in 50ms", ".incomplete keeps the 500 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var ranges []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/api/models/") {
					w.Write([]byte(`{"sha": "` + commit + `", "siblings": [{"rfilename": "config.json"}]}`))
					return
				}
				w.Header().Set("X-Repo-Commit", commit)
				w.Header().Set("ETag", `"mirror-etag"`) // not a hash: only the size is checked
				w.Header().Set("Content-Length", "1000")
				if r.Method == http.MethodHead {
					return
				}
				mu.Lock()
				ranges = append(ranges, r.Header.Get("Range"))
				mu.Unlock()
				if r.Header.Get("Range") == "bytes=500-" {
					w.Header().Set("Content-Range", "bytes 500-999/1000")
					w.Header().Set("Content-Length", "500")
					w.WriteHeader(http.StatusPartialContent)
					if !tc.stallAll {
						w.Write(data[500:])
						return
					}
				} else {
					w.Write(data[:500])
				}
				w.(http.Flusher).Flush()
				select { // stall until the client gives up
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			}))
			defer srv.Close()
			c := &Client{Endpoint: srv.URL, Cache: t.TempDir(), Stall: 50 * time.Millisecond}
			snap, err := c.Download(context.Background(), repo, "", nil)
			if tc.errs != nil {
				wantErr(t, err, tc.errs...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			b, err := os.ReadFile(filepath.Join(snap, "config.json"))
			if err != nil || string(b) != string(data) || strings.Join(ranges, ",") != ",bytes=500-" {
				t.Errorf("got %d bytes (%v) with ranges %q; want the 1000 bytes after a stall and a resume from 500", len(b), err, ranges)
			}
		})
	}
}
