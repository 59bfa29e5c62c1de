// Package hubtest is a fake Hugging Face Hub for tests: it speaks the
// Hub's URL scheme and headers (the revision API, resolve URLs with
// X-Repo-Commit, ETag, X-Linked-Etag, X-Linked-Size, a redirect to a
// separate storage host for LFS files, X-Error-Code on errors) over
// net/http/httptest on loopback, and records every request it answers.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Server is the fake Hub and its storage host.
type Server struct {
	Hub     *httptest.Server // the Hub: /api/models/... and /ORG/NAME/resolve/...
	Storage *httptest.Server // the LFS storage host: /lfs/SHA256
	// Token, when set, is the only token accepted: a request without
	// "Authorization: Bearer TOKEN" gets 401, as for a private repo.
	Token string
	// Body, when set, gives the bytes actually sent for a file (a
	// corruption); it is called with the file's path and its true bytes.
	Body func(path string, data []byte) []byte
	// Cut, when set, gives how many body bytes a GET of path starting at
	// byte start may send before the connection is dropped; a negative
	// answer sends everything.
	Cut func(path string, start int64) int64
	// Status, when set and returning non-zero, answers a GET of path's
	// bytes with that status instead.
	Status func(path string, start int64) int

	mu    sync.Mutex
	repos map[string]*Repo
	lfs   map[string]lfsBlob // sha256 -> blob
	log   []Request
}

type lfsBlob struct {
	path string
	data []byte
}

// Request is one request the fake Hub or storage host answered.
type Request struct {
	Host   string // "hub" or "storage"
	Method string
	Path   string
	Range  string
	Auth   string // the Authorization header
}

// Repo is a model repo: commits of files and branches naming commits.
type Repo struct {
	commits  map[string]map[string][]byte
	branches map[string]string
}

// New starts a fake Hub; it stops when the test ends.
func New(t testing.TB) *Server {
	s := Start()
	t.Cleanup(s.Close)
	return s
}

// Start starts a fake Hub outside a test; Close stops it.
func Start() *Server {
	s := &Server{repos: map[string]*Repo{}, lfs: map[string]lfsBlob{}}
	s.Hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.Storage = httptest.NewServer(http.HandlerFunc(s.serveStorage))
	return s
}

// Close stops the Hub and the storage host.
func (s *Server) Close() {
	s.Hub.Close()
	s.Storage.Close()
}

// IsLFS reports whether the fake Hub stores path in LFS: *.safetensors,
// as the Hub's default .gitattributes does.
func IsLFS(path string) bool { return strings.HasSuffix(path, ".safetensors") }

// Commit adds a commit holding files to repo (created when new), points
// branch at it, and returns its hash (the sha1 of its contents).
func (s *Server) Commit(repo, branch string, files map[string][]byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[repo]
	if r == nil {
		r = &Repo{commits: map[string]map[string][]byte{}, branches: map[string]string{}}
		s.repos[repo] = r
	}
	h := sha1.New()
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	fmt.Fprintf(h, "%s\x00%d\x00", repo, len(r.commits))
	for _, name := range names {
		fmt.Fprintf(h, "%s\x00%x\x00", name, sha256.Sum256(files[name]))
		if IsLFS(name) {
			sum := sha256.Sum256(files[name])
			s.lfs[hex.EncodeToString(sum[:])] = lfsBlob{name, files[name]}
		}
	}
	commit := hex.EncodeToString(h.Sum(nil))
	r.commits[commit] = maps.Clone(files)
	r.branches[branch] = commit
	return commit
}

// Requests returns the requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Reset forgets the requests answered so far.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

// ETag is the ETag the Hub gives a file: the sha256 of an LFS file's bytes,
// else git's blob sha1.
func ETag(path string, data []byte) string {
	if IsLFS(path) {
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Server) record(host string, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, Request{host, r.Method, r.URL.EscapedPath(), r.Header.Get("Range"), r.Header.Get("Authorization")})
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// lookup finds repo and the commit rev names.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, repo, rev string) (files map[string][]byte, commit string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	authed := r.Header.Get("Authorization") != ""
	if s.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.Token {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Invalid username or password.")
		return nil, "", false
	}
	rp := s.repos[repo]
	if rp == nil {
		status := http.StatusUnauthorized // the Hub does not tell anonymous users a private repo exists
		if authed {
			status = http.StatusNotFound
		}
		hubError(w, status, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	commit = rev
	if c, ok := rp.branches[rev]; ok {
		commit = c
	}
	files, ok = rp.commits[commit]
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, "", false
	}
	return files, commit, true
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.record("hub", r)
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/api/models/"); ok && r.Method == http.MethodGet {
		// /api/models/ORG/NAME/revision/REV (REV path-escaped).
		parts := strings.SplitN(rest, "/", 4)
		if len(parts) != 4 || parts[2] != "revision" {
			hubError(w, http.StatusNotFound, "", "Not Found")
			return
		}
		esc := strings.SplitN(r.URL.EscapedPath(), "/", 7)
		rev := parts[3]
		if len(esc) == 7 {
			rev = unescape(esc[6])
		}
		files, commit, ok := s.lookup(w, r, parts[0]+"/"+parts[1], rev)
		if !ok {
			return
		}
		type sibling struct {
			RFilename string `json:"rfilename"`
		}
		out := struct {
			ID       string    `json:"id"`
			SHA      string    `json:"sha"`
			Siblings []sibling `json:"siblings"`
		}{ID: parts[0] + "/" + parts[1], SHA: commit}
		for name := range files {
			out.Siblings = append(out.Siblings, sibling{name})
		}
		slices.SortFunc(out.Siblings, func(a, b sibling) int { return strings.Compare(a.RFilename, b.RFilename) })
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
		return
	}
	// /ORG/NAME/resolve/REV/PATH
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		hubError(w, http.StatusNotFound, "", "Not Found")
		return
	}
	files, commit, ok := s.lookup(w, r, parts[0]+"/"+parts[1], parts[3])
	if !ok {
		return
	}
	path := parts[4]
	data, ok := files[path]
	w.Header().Set("X-Repo-Commit", commit)
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", path+" does not exist on \""+parts[3]+"\"")
		return
	}
	if IsLFS(path) {
		sum := ETag(path, data)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("ETag", `"`+ETag("pointer", []byte("version https://git-lfs.github.com/spec/v1\noid sha256:"+sum))+`"`)
		w.Header().Set("Location", s.Storage.URL+"/lfs/"+sum)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+ETag(path, data)+`"`)
	s.serveBytes(w, r, path, data)
}

func (s *Server) serveStorage(w http.ResponseWriter, r *http.Request) {
	s.record("storage", r)
	sum, ok := strings.CutPrefix(r.URL.Path, "/lfs/")
	s.mu.Lock()
	b, found := s.lfs[sum]
	s.mu.Unlock()
	if !ok || !found || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	s.serveBytes(w, r, b.path, b.data)
}

// serveBytes answers a GET or HEAD of a file's bytes, honouring
// "Range: bytes=N-" and the Body, Cut and Status hooks.
func (s *Server) serveBytes(w http.ResponseWriter, r *http.Request, path string, data []byte) {
	if s.Body != nil {
		data = s.Body(path, data)
	}
	total := int64(len(data))
	var start int64
	if rng := r.Header.Get("Range"); rng != "" {
		v, ok := strings.CutPrefix(rng, "bytes=")
		n, err := strconv.ParseInt(strings.TrimSuffix(v, "-"), 10, 64)
		if !ok || !strings.HasSuffix(v, "-") || err != nil || n < 0 {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if n >= total {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", total))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
	}
	if r.Method == http.MethodGet && s.Status != nil {
		if st := s.Status(path, start); st != 0 {
			http.Error(w, http.StatusText(st), st)
			return
		}
	}
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Length", strconv.FormatInt(total-start, 10))
	if r.Header.Get("Range") != "" {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, total-1, total))
		w.WriteHeader(http.StatusPartialContent)
	}
	if r.Method == http.MethodHead {
		return
	}
	body := data[start:]
	if s.Cut != nil {
		if n := s.Cut(path, start); n >= 0 && n < int64(len(body)) {
			w.Write(body[:n])
			w.(http.Flusher).Flush()
			// Drop the connection mid-body, as a network failure does.
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
	}
	w.Write(body)
}

// unescape undoes the path escaping of one segment ("refs%2Fpr%2F1").
func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
