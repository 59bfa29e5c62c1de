package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The cache layout, as huggingface_hub 2.4.0 writes it (file_download.py,
// _hf_hub_download_to_cache_dir):
//
//	CACHE/models--ORG--NAME/blobs/ETAG             the file's bytes, named by its normalized ETag
//	CACHE/models--ORG--NAME/snapshots/COMMIT/PATH  a relative symlink to ../../blobs/ETAG
//	CACHE/models--ORG--NAME/refs/REVISION          the commit a branch or tag resolved to (no newline)
//	CACHE/.locks/models--ORG--NAME/ETAG.lock       held while the blob is written
//	CACHE/CACHEDIR.TAG                             the cache directory tag
//
// huggingface_hub 2.4.0 also keeps trees/COMMIT.json (a tree listing it
// uses to tell a complete snapshot from a partial one); we do not write it,
// and without it huggingface_hub takes a snapshot folder as it is.

// cacheDirTag is huggingface_hub's CACHEDIR.TAG (the Cache Directory Tagging
// Standard's signature line and its comment).
const cacheDirTag = "Signature: 8a477f597d28d172789f06886806bc55\n" +
	"# This file is a cache directory tag created by huggingface_hub.\n" +
	"# For information about cache directory tags, see:\n" +
	"#\thttps://bford.info/cachedir/\n"

// CacheDir is the hub cache directory as huggingface_hub chooses it:
// $HF_HUB_CACHE, else the legacy $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub,
// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
func CacheDir() (string, error) {
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(v); d != "" {
			return expandHome(d)
		}
	}
	home, err := hfHome()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, "hub"), nil
}

// hfHome is $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface (huggingface_hub's constants.HF_HOME).
func hfHome() (string, error) {
	if d := os.Getenv("HF_HOME"); d != "" {
		return expandHome(d)
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		d, err := expandHome(d)
		return filepath.Join(d, "huggingface"), err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory to find the Hugging Face cache in (set HF_HOME or HF_HUB_CACHE): %w", err)
	}
	return filepath.Join(home, ".cache", "huggingface"), nil
}

// expandHome expands a leading "~/" as huggingface_hub does.
func expandHome(p string) (string, error) {
	rest, ok := strings.CutPrefix(p, "~/")
	if !ok && p != "~" {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot expand %q: %w", p, err)
	}
	return filepath.Join(home, rest), nil
}

var repoPart = regexp.MustCompile(`^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$`)

// CheckRepoID checks a model repository id "org/name" by huggingface_hub's
// validate_repo_id rules (letters, digits, '_', '-' and '.'; each part 1 to
// 96 characters starting and ending with a letter, digit or '_'; no "--" or
// ".."; not ending in ".git"), with the org required.
func CheckRepoID(id string) error {
	org, name, ok := strings.Cut(id, "/")
	switch {
	case !ok || strings.Contains(name, "/"):
		return fmt.Errorf("repo id %q: want org/name", id)
	case !repoPart.MatchString(org) || !repoPart.MatchString(name):
		return fmt.Errorf("repo id %q: each part of org/name takes 1 to 96 letters, digits, '_', '-' or '.', and starts and ends with a letter, digit or '_'", id)
	case strings.Contains(id, "--") || strings.Contains(id, ".."):
		return fmt.Errorf("repo id %q: cannot hold \"--\" or \"..\"", id)
	case strings.HasSuffix(id, ".git"):
		return fmt.Errorf("repo id %q: cannot end in .git", id)
	}
	return nil
}

// RepoFolder is the repo's folder in cache, models--ORG--NAME.
func RepoFolder(cache, repo string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommit reports whether rev is a full commit hash (40 lower-case hex
// digits), which huggingface_hub never resolves through refs/.
func IsCommit(rev string) bool { return commitHash.MatchString(rev) }

// checkRevision refuses revisions that would escape refs/ or snapshots/
// (a branch may hold '/', e.g. refs/pr/1, giving nested ref files).
func checkRevision(rev string) error {
	if rev == "" {
		return fmt.Errorf("empty revision")
	}
	if strings.ContainsAny(rev, "\\\x00") || strings.HasPrefix(rev, "/") {
		return fmt.Errorf("revision %q: want a branch, tag or commit hash", rev)
	}
	for _, part := range strings.Split(rev, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("revision %q: want a branch, tag or commit hash", rev)
		}
	}
	return nil
}

// ErrNotCached is wrapped by Snapshot when the cache does not hold the
// revision.
var ErrNotCached = errors.New("not in the Hugging Face cache")

// Snapshot returns the cached snapshot directory of repo at revision (a
// branch, a tag or a commit hash) without touching the network, as
// huggingface_hub's snapshot_download(local_files_only=True) finds it: a
// commit hash names snapshots/COMMIT; another revision is read from
// refs/REVISION. When revision is "main" and refs/main is missing (a repo
// downloaded at one commit hash), the only snapshot is taken. The snapshot
// must hold config.json. Errors wrap ErrNotCached when the revision is not
// there (or incomplete).
func Snapshot(cache, repo, revision string) (string, error) {
	if err := CheckRepoID(repo); err != nil {
		return "", err
	}
	if err := checkRevision(revision); err != nil {
		return "", err
	}
	root := RepoFolder(cache, repo)
	if _, err := os.Stat(root); err != nil {
		return "", fmt.Errorf("%s: %w %s (no %s)", repo, ErrNotCached, cache, root)
	}
	commit := revision
	if !IsCommit(revision) {
		ref := filepath.Join(root, "refs", filepath.FromSlash(revision))
		b, err := os.ReadFile(ref)
		switch {
		case err == nil:
			commit = strings.TrimSpace(string(b))
			if !IsCommit(commit) {
				return "", fmt.Errorf("%s: %s holds %q, want a commit hash (40 hex digits)", repo, ref, commit)
			}
		case errors.Is(err, fs.ErrNotExist) && revision == "main":
			dirs := snapshotDirs(root)
			if len(dirs) != 1 {
				return "", fmt.Errorf("%s: %w: %s has no refs/main and %d snapshots (want exactly one to choose it)", repo, ErrNotCached, root, len(dirs))
			}
			commit = dirs[0]
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("%s: %w: no %s", repo, ErrNotCached, ref)
		default:
			return "", fmt.Errorf("%s: %w", repo, err)
		}
	}
	snap := filepath.Join(root, "snapshots", commit)
	if _, err := os.Stat(filepath.Join(snap, "config.json")); err != nil {
		return "", fmt.Errorf("%s: %w: the snapshot %s has no config.json (an incomplete download?)", repo, ErrNotCached, snap)
	}
	return snap, nil
}

// snapshotDirs lists the directories in root/snapshots.
func snapshotDirs(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, "snapshots"))
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

// writeRef records that revision resolved to commit in refs/REVISION,
// written atomically and only when it changes (huggingface_hub's
// _cache_commit_hash_for_specific_revision); nothing for a commit hash.
func writeRef(root, revision, commit string) error {
	if revision == commit {
		return nil
	}
	ref := filepath.Join(root, "refs", filepath.FromSlash(revision))
	if b, err := os.ReadFile(ref); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(ref), filepath.Base(ref)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(commit)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), ref)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", ref, err)
	}
	return nil
}

// linkSnapshot points snapshots/COMMIT/PATH at blobs/ETAG with a relative
// symlink (huggingface_hub's _create_symlink), replacing what was there.
func linkSnapshot(blob, pointer string) error {
	if err := os.MkdirAll(filepath.Dir(pointer), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(pointer), blob)
	if err != nil {
		return err
	}
	os.Remove(pointer)
	if err := os.Symlink(rel, pointer); err != nil {
		return fmt.Errorf("linking %s to %s: %w", pointer, blob, err)
	}
	return nil
}

// tagCache writes CACHEDIR.TAG in cache when it is missing (best effort,
// as huggingface_hub).
func tagCache(cache string) {
	p := filepath.Join(cache, "CACHEDIR.TAG")
	if _, err := os.Stat(p); err == nil {
		return
	}
	os.WriteFile(p, []byte(cacheDirTag), 0o644)
}
