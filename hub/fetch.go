package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// fileMeta is what the HEAD of a file's resolve URL tells.
type fileMeta struct {
	etag     string // normalized; the blob's name
	lfs      bool   // X-Linked-Etag was given
	size     int64  // -1 when unknown
	location string // where to GET the bytes
	sameHost bool   // location is on the Hub's own host (the token may go there)
}

// maxRetries is how many failures in a row, with no byte received between
// them, a download survives (huggingface_hub's http_get allows 5).
const maxRetries = 5

// maxRedirects bounds the redirects followed on the Hub's own host.
const maxRedirects = 10

var safeETag = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,200}$`)

// normalizeETag is huggingface_hub's _normalize_etag: Python's
// etag.lstrip("W/").strip('"'), which drops every leading 'W' and '/'
// (so a weak ETag W/"x" gives x) and the surrounding quotes.
func normalizeETag(s string) string {
	return strings.Trim(strings.TrimLeft(s, "W/"), `"`)
}

// resolveURL is {endpoint}/{repo}/resolve/{commit}/{file} (hf_hub_url).
func (c *Client) resolveURL(repo, commit, file string) string {
	parts := strings.Split(file, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return c.Endpoint + "/" + repo + "/resolve/" + url.PathEscape(commit) + "/" + strings.Join(parts, "/")
}

// fetchFile makes snapshots/COMMIT/FILE, downloading its blob if needed.
func (c *Client) fetchFile(ctx context.Context, repo, commit, file string, i int, p *progress) error {
	root := RepoFolder(c.Cache, repo)
	pointer := filepath.Join(root, "snapshots", commit, filepath.FromSlash(file))
	if _, err := os.Stat(pointer); err == nil {
		c.Stats.Reused++
		p.cached(i, file)
		return nil
	}
	meta, err := c.head(ctx, repo, commit, file)
	if err != nil {
		return err
	}
	blobs := filepath.Join(root, "blobs")
	blob := filepath.Join(blobs, meta.etag)
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", blobs, err)
	}
	locks := filepath.Join(c.Cache, ".locks", filepath.Base(root))
	if err := os.MkdirAll(locks, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", locks, err)
	}
	unlock, err := lockFile(filepath.Join(locks, meta.etag+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(blob); err == nil {
		c.Stats.Reused++
		p.cached(i, file)
		return linkSnapshot(blob, pointer)
	}
	if err := c.downloadBlob(ctx, repo, commit, file, meta, blob, i, p); err != nil {
		return err
	}
	c.Stats.Fetched++
	return linkSnapshot(blob, pointer)
}

// head reads a file's metadata from its resolve URL, following redirects
// that stay on the Hub's host and stopping at one that leaves it (the
// storage host of an LFS file), as get_hf_file_metadata does.
func (c *Client) head(ctx context.Context, repo, commit, file string) (*fileMeta, error) {
	start := c.resolveURL(repo, commit, file)
	hc := *c.client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	u := start
	for range maxRedirects {
		resp, err := c.do(ctx, &hc, http.MethodHead, u, true, "")
		if err != nil {
			return nil, fmt.Errorf("%s@%s: %s: asking %s: %w", repo, commit, file, u, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return nil, c.statusError(resp, repo+"@"+commit+": "+file, commit)
		}
		loc := resp.Header.Get("Location")
		redirect := resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != ""
		var target string
		if redirect {
			t, err := resp.Request.URL.Parse(loc)
			if err != nil {
				return nil, fmt.Errorf("%s@%s: %s: %s redirected to %q: %w", repo, commit, file, u, loc, err)
			}
			target = t.String()
			if sameOrigin(u, target) {
				u = target
				continue
			}
		}
		return c.fileMeta(resp, repo, commit, file, u, target)
	}
	return nil, fmt.Errorf("%s@%s: %s: more than %d redirects from %s", repo, commit, file, maxRedirects, start)
}

// fileMeta reads the HEAD answer's headers; target is the redirect's
// location, "" when it was not one.
func (c *Client) fileMeta(resp *http.Response, repo, commit, file, u, target string) (*fileMeta, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s@%s: %s: %s %s", repo, commit, file, u, fmt.Sprintf(format, a...))
	}
	if got := resp.Header.Get("X-Repo-Commit"); got == "" {
		return nil, bad("answered without an X-Repo-Commit header: not a Hugging Face Hub endpoint (check HF_ENDPOINT)")
	} else if got != commit {
		return nil, bad("answered for the commit %q, want %s", got, commit)
	}
	m := &fileMeta{size: -1, location: u, sameHost: true}
	raw := resp.Header.Get("X-Linked-Etag")
	m.lfs = raw != ""
	if raw == "" {
		raw = resp.Header.Get("ETag")
	}
	m.etag = normalizeETag(raw)
	if m.etag == "" {
		return nil, bad("gave no ETag, so the download cannot be checked or named in the cache")
	}
	if !safeETag.MatchString(m.etag) || m.etag == "." || m.etag == ".." {
		return nil, bad("gave the ETag %q, not usable as a blob name (want letters, digits, '.', '_', '-')", m.etag)
	}
	sz := resp.Header.Get("X-Linked-Size")
	if sz == "" && target == "" {
		sz = resp.Header.Get("Content-Length")
	}
	if sz != "" {
		n, err := strconv.ParseInt(sz, 10, 64)
		switch {
		case err != nil || n < 0:
			return nil, bad("gave the size %q, want a byte count", sz)
		case n > MaxFileSize:
			return nil, bad("announced %d bytes, more than the %d bytes (50 GB) mlxgo downloads over plain HTTP", n, MaxFileSize)
		}
		m.size = n
	}
	if target != "" {
		m.location, m.sameHost = target, false
	}
	return m, nil
}

// sameOrigin reports whether two URLs share scheme, host and port.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Scheme == ub.Scheme && ua.Host == ub.Host
}

// do sends one request; auth adds the token (the Hub's own host only).
func (c *Client) do(ctx context.Context, hc *http.Client, method, u string, auth bool, rng string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if auth {
		c.auth(req)
	} else {
		req.Header.Set("User-Agent", "mlxgo")
	}
	// No compression: sizes and Range offsets are the file's bytes.
	req.Header.Set("Accept-Encoding", "identity")
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	return hc.Do(req)
}

// downloadBlob fills blob+".incomplete", resuming what an earlier attempt
// left there, checks it against the ETag and renames it to blob.
func (c *Client) downloadBlob(ctx context.Context, repo, commit, file string, m *fileMeta, blob string, i int, p *progress) error {
	inc := blob + ".incomplete"
	what := fmt.Sprintf("%s@%s: %s", repo, commit, file)
	f, err := os.OpenFile(inc, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	have := st.Size()
	if m.size >= 0 && have > m.size {
		have = 0 // longer than the file: not a prefix of it
	}
	if have > 0 {
		c.Stats.Resumed++
	}
	if m.size >= 0 {
		if err := checkSpace(filepath.Dir(blob), m.size-have); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	p.begin(i, file, m.size, have)
	have, err = c.fill(ctx, f, inc, m, have, what, p)
	if err != nil {
		p.fail()
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%s: writing %s: %w", what, inc, err)
	}
	if err := verify(f, m, have); err != nil {
		f.Close()
		os.Remove(inc)
		p.fail()
		return fmt.Errorf("%s: %w; removed %s, run again to download it afresh", what, err, inc)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: writing %s: %w", what, inc, err)
	}
	if err := os.Rename(inc, blob); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	p.done()
	return nil
}

// fill downloads from offset have to the end, retrying dropped connections
// and retryable answers with a Range request from where it stopped. It
// returns the file's length.
func (c *Client) fill(ctx context.Context, f *os.File, inc string, m *fileMeta, have int64, what string, p *progress) (int64, error) {
	failures := 0
	best := have // the furthest the file has got; only going past it counts as progress
	var last error
	for {
		if m.size >= 0 && have == m.size {
			return have, nil
		}
		if failures > maxRetries {
			return have, fmt.Errorf("%s: gave up after %d failures in a row at byte %d of %s (%w); %s keeps the %d bytes received, run again to resume", what, failures, have, sizeText(m.size), last, inc, have)
		}
		if failures > 0 {
			c.Stats.HTTPErrors++
			select {
			case <-time.After(c.RetryWait):
			case <-ctx.Done():
				return have, fmt.Errorf("%s: %w", what, ctx.Err())
			}
		}
		_, err := c.fillOnce(ctx, f, inc, m, &have, what, p)
		if err == nil {
			return have, nil
		}
		if isFinal(err) || ctx.Err() != nil {
			return have, err
		}
		if have > best {
			best, failures = have, 0
		}
		failures++
		last = err
	}
}

// fillOnce sends one GET and copies its body; it returns the bytes
// received and nil once the file is whole (or its end was reached when its
// size is unknown). A *finalError is not retried.
func (c *Client) fillOnce(ctx context.Context, f *os.File, inc string, m *fileMeta, have *int64, what string, p *progress) (int64, error) {
	stop := func(format string, a ...any) error {
		return &finalError{fmt.Errorf("%s: %s", what, fmt.Sprintf(format, a...))}
	}
	rng := ""
	if *have > 0 {
		rng = fmt.Sprintf("bytes=%d-", *have)
	}
	// A body that stops arriving for c.Stall cancels this attempt.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var watchdog *time.Timer
	if c.Stall > 0 {
		watchdog = time.AfterFunc(c.Stall, func() {
			cancel(fmt.Errorf("no byte received in %v", c.Stall))
		})
		defer watchdog.Stop()
	}
	resp, err := c.do(ctx, c.client(), http.MethodGet, m.location, m.sameHost, rng)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		return 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		if *have > 0 {
			// The server ignored the Range: start again from byte 0.
			*have = 0
			p.restart()
		}
	case resp.StatusCode == http.StatusPartialContent && *have > 0:
		start, total, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok || start != *have {
			return 0, stop("asked for bytes from %d, got Content-Range %q", *have, resp.Header.Get("Content-Range"))
		}
		if m.size >= 0 && total >= 0 && total != m.size {
			return 0, stop("the file is %d bytes by its Content-Range, %d by its metadata", total, m.size)
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && *have > 0:
		// What .incomplete holds does not fit the file: start again.
		err := fmt.Errorf("%s answered 416 to bytes=%d-", m.location, *have)
		*have = 0
		p.restart()
		if err := f.Truncate(0); err != nil {
			return 0, stop("writing %s: %v", inc, err)
		}
		return 0, err
	case retryable(resp.StatusCode):
		return 0, fmt.Errorf("%s answered %s", m.location, resp.Status)
	default:
		return 0, &finalError{c.statusError(resp, what, "")}
	}
	if err := f.Truncate(*have); err != nil {
		return 0, stop("writing %s: %v", inc, err)
	}
	if _, err := f.Seek(*have, io.SeekStart); err != nil {
		return 0, stop("writing %s: %v", inc, err)
	}
	limit := MaxFileSize - *have
	if m.size >= 0 {
		limit = m.size - *have
	}
	// One byte past the limit tells a too-long body from a whole one.
	n, err := io.Copy(&countWriter{f: f, p: p, bytes: &c.Stats.Bytes, watchdog: watchdog, stall: c.Stall}, io.LimitReader(resp.Body, limit+1))
	var we *writeError
	if errors.As(err, &we) {
		*have += n
		cause := we.err
		var pe *fs.PathError
		if errors.As(cause, &pe) {
			cause = pe.Err // the path is in the message already
		}
		return n, stop("writing %s: %v (after %d bytes)", inc, cause, *have)
	}
	*have += n
	if n > limit {
		f.Truncate(0)
		if m.size >= 0 {
			return n, stop("%s sent more than the %d bytes announced", m.location, m.size)
		}
		return n, stop("%s sent more than %d bytes, the most mlxgo downloads", m.location, MaxFileSize)
	}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = cause
		}
		return n, fmt.Errorf("reading %s: %w", m.location, err)
	}
	if m.size >= 0 && *have < m.size {
		return n, fmt.Errorf("%s ended the body at byte %d of %d", m.location, *have, m.size)
	}
	return n, nil
}

// contentRange parses "bytes START-END/TOTAL" (TOTAL may be '*': -1).
func contentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	span, tot, found := strings.Cut(rest, "/")
	first, _, found2 := strings.Cut(span, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil || total < 0 {
			return 0, 0, false
		}
	}
	return start, total, true
}

// writeError tells a failed write (the disk) from a failed read (the
// network) in io.Copy.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// countWriter writes to f and reports progress.
type countWriter struct {
	f        *os.File
	p        *progress
	bytes    *int64
	watchdog *time.Timer // reset on every write; nil: none
	stall    time.Duration
}

func (w *countWriter) Write(b []byte) (int, error) {
	if w.watchdog != nil {
		w.watchdog.Reset(w.stall)
	}
	n, err := w.f.Write(b)
	w.p.add(int64(n))
	*w.bytes += int64(n)
	if err != nil {
		return n, &writeError{err}
	}
	return n, nil
}

// verify checks the downloaded file against its ETag: a 64-hex-digit ETag
// (an LFS file's) is the sha256 of the bytes, a 40-hex-digit one (a file
// stored in git) git's blob sha1 ("blob SIZE\x00" then the bytes), as
// huggingface_hub describes its ETags; other ETags (a mirror's) are not
// hashes and only the size is checked.
func verify(f *os.File, m *fileMeta, size int64) error {
	if m.size >= 0 && size != m.size {
		return fmt.Errorf("got %d bytes, want %d", size, m.size)
	}
	var h hash.Hash
	kind := ""
	switch {
	case len(m.etag) == 64 && isHex(m.etag):
		h, kind = sha256.New(), "sha256"
	case len(m.etag) == 40 && isHex(m.etag) && !m.lfs:
		h, kind = sha1.New(), "git blob sha1"
		fmt.Fprintf(h, "blob %d\x00", size)
	default:
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("reading it back: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(m.etag) {
		return fmt.Errorf("the %s of the downloaded bytes is %s, the Hub's ETag says %s: the download is corrupt", kind, got, m.etag)
	}
	return nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
