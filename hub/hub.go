// Package hub downloads model repositories from the Hugging Face Hub into
// the standard cache layout, as huggingface_hub's snapshot_download does, so
// huggingface_hub, mlx_lm and mlxgo all read what it writes.
//
// A download lists the files of a revision (GET
// {endpoint}/api/models/{repo}/revision/{rev}: the commit "sha" and the
// "siblings"), keeps those the allow patterns match, and fetches each one
// that the snapshot lacks: a HEAD of {endpoint}/{repo}/resolve/{commit}/{file}
// gives its ETag (X-Linked-Etag for LFS files, else ETag), its size
// (X-Linked-Size, else Content-Length) and, for LFS files, a redirect to the
// storage host; the bytes go to blobs/ETAG.incomplete, resumed with a Range
// request when a previous attempt left part of it, are checked against the
// ETag (sha256 for LFS files, git's blob sha1 for others) and renamed to
// blobs/ETAG; snapshots/COMMIT/FILE links to the blob.
package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the Hub's address when HF_ENDPOINT is unset.
const DefaultEndpoint = "https://huggingface.co"

// DefaultAllowPatterns are the files mlx_lm needs: mlx_lm 0.32.2's
// DEFAULT_ALLOW_PATTERNS (mlx_lm/utils.py, passed by _download to
// snapshot_download) without "*.py": mlxgo runs no code from a repo
// (mlx_lm fetches it for trust_remote_code tokenizers).
var DefaultAllowPatterns = []string{
	"*.json",
	"model*.safetensors",
	"tokenizer.model",
	"*.tiktoken",
	"tiktoken.model",
	"*.txt",
	"*.jsonl",
	"*.jinja",
}

// MaxFileSize is the largest file a download accepts: 50 GB,
// huggingface_hub's MAX_HTTP_DOWNLOAD_SIZE for plain HTTP downloads. A
// larger announced size is refused before any byte is written, and a body
// running past it is cut off with an error.
const MaxFileSize int64 = 50_000_000_000

// maxListing caps the revision listing (a JSON document) read into memory.
const maxListing = 32 << 20

// Client downloads from one Hub endpoint into one cache.
type Client struct {
	Endpoint string       // Hub address, no trailing '/'
	Token    string       // sent as "Authorization: Bearer TOKEN" to the Hub's own host; "" for none
	Cache    string       // the hub cache directory
	HTTP     *http.Client // nil: a client with no overall timeout
	// Progress receives the progress display; nil for none. Terminal makes
	// it a redrawn bar ('\r'), else one plain line per file.
	Progress io.Writer
	Terminal bool
	// RetryWait is the pause before retrying after a dropped connection or
	// a 408/429/5xx answer (huggingface_hub waits 1 s).
	RetryWait time.Duration
	// Stall is how long a download may go without receiving a byte before
	// the connection is dropped and the download retried; 0: no limit.
	// NewClient takes $HF_HUB_DOWNLOAD_TIMEOUT seconds, else 10 s, as
	// huggingface_hub's read timeout.
	Stall time.Duration
	// Stats counts what Download did (for tests and the summary line).
	Stats Stats
}

// Stats counts the work of a Client's downloads.
type Stats struct {
	Files      int   // files in the snapshot after the filter
	Fetched    int   // blobs downloaded (or completed)
	Reused     int   // files already in the snapshot or whose blob was cached
	Bytes      int64 // bytes received in file bodies
	Resumed    int   // downloads continued from a .incomplete file with a Range request
	HTTPErrors int   // retried failures
}

// Offline reports whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set
// to 1, ON, YES or TRUE, as huggingface_hub reads it.
func Offline() bool {
	for _, v := range []string{"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} {
		switch strings.ToUpper(os.Getenv(v)) {
		case "1", "ON", "YES", "TRUE":
			return true
		}
	}
	return false
}

// NewClient makes a Client from the environment: HF_ENDPOINT (else
// DefaultEndpoint), the token in HF_TOKEN (else the file $HF_TOKEN_PATH,
// else $HF_HOME/token, as huggingface_hub's get_token), and CacheDir.
func NewClient() (*Client, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	ep := strings.TrimRight(cmp.Or(os.Getenv("HF_ENDPOINT"), DefaultEndpoint), "/")
	if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("HF_ENDPOINT %q: want an http(s) URL such as %s", ep, DefaultEndpoint)
	}
	tok, err := token()
	if err != nil {
		return nil, err
	}
	timeout := 10 * time.Second
	if v := os.Getenv("HF_HUB_DOWNLOAD_TIMEOUT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("HF_HUB_DOWNLOAD_TIMEOUT %q: want a number of seconds >= 1", v)
		}
		timeout = time.Duration(n) * time.Second
	}
	// Connecting and waiting for an answer's headers take at most timeout
	// (huggingface_hub's 10 s); a body is watched by Stall.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = timeout
	tr.ResponseHeaderTimeout = timeout
	return &Client{Endpoint: ep, Token: tok, Cache: cache, HTTP: &http.Client{Transport: tr},
		RetryWait: time.Second, Stall: timeout}, nil
}

// token is HF_TOKEN, else the stored token file's first line, else "".
func token() (string, error) {
	if t := strings.TrimSpace(os.Getenv("HF_TOKEN")); t != "" {
		return t, nil
	}
	p := os.Getenv("HF_TOKEN_PATH")
	if p == "" {
		home, err := hfHome()
		if err != nil {
			return "", nil
		}
		p = filepath.Join(home, "token")
	}
	p, err := expandHome(p)
	if err != nil {
		return "", nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", nil // no stored token: anonymous, as huggingface_hub
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("reading the Hugging Face token %s: %w", p, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first), nil
}

// listing is the part of the revision API's answer a download uses.
type listing struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

// Download fetches repo at revision ("" for main) into the cache, keeping
// the files that match one of patterns (nil: DefaultAllowPatterns), and
// returns the snapshot directory. Files already in the snapshot are not
// fetched again; a blob left incomplete by an earlier attempt is resumed.
func (c *Client) Download(ctx context.Context, repo, revision string, patterns []string) (string, error) {
	if err := CheckRepoID(repo); err != nil {
		return "", err
	}
	revision = cmp.Or(revision, "main")
	if err := checkRevision(revision); err != nil {
		return "", err
	}
	if patterns == nil {
		patterns = DefaultAllowPatterns
	}
	allow, err := CompilePatterns(patterns)
	if err != nil {
		return "", err
	}
	info, err := c.revisionInfo(ctx, repo, revision)
	if err != nil {
		return "", err
	}
	var files []string
	for _, s := range info.Siblings {
		if MatchAny(allow, s.RFilename) {
			if err := checkRepoPath(s.RFilename); err != nil {
				return "", fmt.Errorf("%s@%s: the Hub listed %w", repo, revision, err)
			}
			files = append(files, s.RFilename)
		}
	}
	slices.Sort(files)
	files = slices.Compact(files)
	if len(files) == 0 {
		return "", fmt.Errorf("%s@%s: none of its %d files matches the allow patterns %q", repo, revision, len(info.Siblings), patterns)
	}
	root := RepoFolder(c.Cache, repo)
	if err := os.MkdirAll(filepath.Join(root, "snapshots", info.SHA), 0o755); err != nil {
		return "", fmt.Errorf("creating the cache folder: %w", err)
	}
	tagCache(c.Cache)
	if err := writeRef(root, revision, info.SHA); err != nil {
		return "", err
	}
	c.Stats.Files += len(files)
	p := newProgress(c.Progress, c.Terminal, repo, len(files))
	for i, f := range files {
		if err := c.fetchFile(ctx, repo, info.SHA, f, i, p); err != nil {
			return "", err
		}
	}
	return filepath.Join(root, "snapshots", info.SHA), nil
}

// revisionInfo asks the Hub which commit revision is and which files it
// holds.
func (c *Client) revisionInfo(ctx context.Context, repo, revision string) (*listing, error) {
	u := c.Endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(revision)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	c.auth(req)
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s@%s: asking %s: %w", repo, revision, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(resp, repo+"@"+revision, revision)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListing+1))
	if err != nil {
		return nil, fmt.Errorf("%s@%s: reading %s: %w", repo, revision, u, err)
	}
	if len(body) > maxListing {
		return nil, fmt.Errorf("%s@%s: %s answered more than %d bytes, not a revision listing", repo, revision, u, maxListing)
	}
	var info listing
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("%s@%s: %s did not answer a revision listing (JSON with sha and siblings): %w", repo, revision, u, err)
	}
	if !IsCommit(info.SHA) {
		return nil, fmt.Errorf("%s@%s: %s gave the commit %q, want 40 hex digits", repo, revision, u, info.SHA)
	}
	if IsCommit(revision) && info.SHA != revision {
		return nil, fmt.Errorf("%s@%s: %s answered for the commit %s", repo, revision, u, info.SHA)
	}
	return &info, nil
}

// checkRepoPath refuses a file path from the Hub that is not a plain
// relative path inside the snapshot.
func checkRepoPath(p string) error {
	bad := p == "" || strings.ContainsAny(p, "\\\x00") || path.IsAbs(p) || path.Clean(p) != p ||
		p == "." || p == ".." || strings.HasPrefix(p, "../")
	if bad {
		return fmt.Errorf("the file path %q, which is not a relative path inside the repo", p)
	}
	return nil
}

// auth adds the token, when there is one.
func (c *Client) auth(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("User-Agent", "mlxgo")
}

func (c *Client) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// HTTPError is a Hub answer other than success.
type HTTPError struct {
	Status int
	URL    string
	Msg    string
}

func (e *HTTPError) Error() string { return e.Msg }

// statusError explains a failed Hub answer: the Hub's X-Error-Code and
// X-Error-Message headers when present, and what 401/403/404 usually mean.
// what names the request's subject (repo@revision, and the file).
func (c *Client) statusError(resp *http.Response, what, revision string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		var j struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &j) == nil {
			msg = j.Error
		}
	}
	var hint string
	switch {
	case code == "RevisionNotFound":
		hint = fmt.Sprintf("the repo has no revision %q", revision)
	case code == "EntryNotFound":
		hint = "the repo has no such file at this revision"
	case code == "GatedRepo":
		hint = "the repo is gated: accept its conditions on the Hub and set HF_TOKEN"
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusNotFound && code == "RepoNotFound":
		if c.Token == "" {
			hint = "no such repo, or it is private or gated and needs a token: set HF_TOKEN"
		} else {
			hint = "no such repo, or HF_TOKEN does not give access to it"
		}
	case resp.StatusCode == http.StatusForbidden:
		hint = "HF_TOKEN does not give access to this repo"
	case resp.StatusCode == http.StatusNotFound:
		hint = "not found"
	}
	parts := []string{fmt.Sprintf("%s: %s answered %s", what, resp.Request.URL, resp.Status)}
	if hint != "" {
		parts = append(parts, hint)
	}
	if msg != "" {
		parts = append(parts, fmt.Sprintf("the Hub says %q", msg))
	}
	return &HTTPError{Status: resp.StatusCode, URL: resp.Request.URL.String(), Msg: strings.Join(parts, ": ")}
}

// retryable reports whether a status is worth another try.
func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// finalError is a download error no retry can fix.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

func isFinal(err error) bool {
	var f *finalError
	return errors.As(err, &f)
}
