package hub

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/hub/hubtest"
	"github.com/mlxgo/mlxgo/internal/testenv"
)

// TestHuggingFaceHubReadsOurCache pulls into a cache, then has
// huggingface_hub (the oracle venv's, offline) find the snapshot, a file
// and a branch in it, and scan the whole cache for anything malformed.
func TestHuggingFaceHubReadsOurCache(t *testing.T) {
	py := testenv.Python(t)
	s := hubtest.New(t)
	files := tinyFiles(t)
	commit := s.Commit(repo, "main", files)
	files["config.json"] = append(files["config.json"], '\n')
	prCommit := s.Commit(repo, "refs/pr/1", files)
	cache := t.TempDir()
	c := newClient(s, cache)
	snap := pull(t, c, "", nil)
	prSnap := pull(t, c, "refs/pr/1", nil)

	script := `
import json, sys
from huggingface_hub import snapshot_download, hf_hub_download, scan_cache_dir
from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS
repo = sys.argv[1]
info = scan_cache_dir()
out = {
    "snapshot": snapshot_download(repo, allow_patterns=DEFAULT_ALLOW_PATTERNS),
    "pr": snapshot_download(repo, revision="refs/pr/1"),
    "config": hf_hub_download(repo, "config.json"),
    "nested": hf_hub_download(repo, "sub/extra.json"),
    "warnings": [str(w) for w in info.warnings],
    "repos": [{"id": r.repo_id, "refs": sorted(r.refs), "size": r.size_on_disk,
               "revisions": sorted([rev.commit_hash, sorted(f.file_name for f in rev.files)] for rev in r.revisions)}
              for r in info.repos],
}
print(json.dumps(out))`
	cmd := exec.Command(py, "-c", script, repo)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_HUB_CACHE="+cache, "HF_HUB_DISABLE_TELEMETRY=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("huggingface_hub on our cache: %v\n%s", err, stderr)
	}
	var got struct {
		Snapshot, PR, Config, Nested string
		Warnings                     []string
		Repos                        []struct {
			ID        string
			Refs      []string
			Size      int64
			Revisions [][2]json.RawMessage
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, c := range []struct{ what, got, want string }{
		{"snapshot_download", got.Snapshot, snap},
		{"snapshot_download(revision=refs/pr/1)", got.PR, prSnap},
		{"hf_hub_download config.json", got.Config, filepath.Join(snap, "config.json")},
		{"hf_hub_download sub/extra.json", got.Nested, filepath.Join(snap, "sub", "extra.json")},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.what, c.got, c.want)
		}
	}
	if len(got.Warnings) != 0 {
		t.Errorf("scan_cache_dir warns: %q", got.Warnings)
	}
	if len(got.Repos) != 1 || got.Repos[0].ID != repo || !slices.Equal(got.Repos[0].Refs, []string{"main", "refs/pr/1"}) || len(got.Repos[0].Revisions) != 2 {
		t.Fatalf("scan_cache_dir: %s, want %s with refs main and refs/pr/1 and 2 revisions", out, repo)
	}
	var size int64
	for _, f := range wantFiles {
		size += int64(len(files[f])) // the blobs: pr's config.json plus everything main has
	}
	oldConfig, _ := os.ReadFile(filepath.Join(snap, "config.json"))
	size += int64(len(oldConfig))
	if got.Repos[0].Size != size {
		t.Errorf("scan_cache_dir size_on_disk %d, want %d (each blob once)", got.Repos[0].Size, size)
	}
	for _, rev := range got.Repos[0].Revisions {
		var hash string
		var names []string
		json.Unmarshal(rev[0], &hash)
		json.Unmarshal(rev[1], &names)
		if hash != commit && hash != prCommit || len(names) != len(wantFiles) {
			t.Errorf("scan_cache_dir revision %s with files %q, want %s or %s with %d files", hash, names, commit, prCommit, len(wantFiles))
		}
	}
}
