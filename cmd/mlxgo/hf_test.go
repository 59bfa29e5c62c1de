package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/hub/hubtest"
)

// No test reaches the real Hub: a --model ORG/NAME missing from a test's
// cache, in a test that did not point HF_ENDPOINT at a fake Hub, fails at
// once on the discard port instead of downloading from huggingface.co. (The
// binary standing in for mlxgo keeps what its test set.)
func init() {
	if os.Getenv("MLXGO_TEST_AS_MLXGO") != "1" {
		os.Setenv("HF_ENDPOINT", "http://127.0.0.1:9")
	}
}

const (
	commitA = "0123456789abcdef0123456789abcdef01234567"
	commitB = "89abcdef0123456789abcdef0123456789abcdef"
)

// fakeHubRepo writes models--org--name under cache with a snapshot holding
// config.json, and refs/main naming it when ref is true. It returns the
// snapshot directory.
func fakeHubRepo(t *testing.T, cache, repo, commit string, ref bool) string {
	t.Helper()
	root := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	snap := filepath.Join(root, "snapshots", commit)
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(snap, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ref {
		if err := os.MkdirAll(filepath.Join(root, "refs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "refs", "main"), []byte(commit+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

// clearHFEnv unsets every variable hfHubCache and the downloads read and
// points HOME at a fresh directory, so the test sees only what it sets.
func clearHFEnv(t *testing.T) string {
	t.Helper()
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"} {
		t.Setenv(v, "")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	return home
}

func TestHFHubCacheLocation(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want func(home, tmp string) string
	}{
		{"default", nil, func(home, _ string) string { return filepath.Join(home, ".cache", "huggingface", "hub") }},
		{"xdg", map[string]string{"XDG_CACHE_HOME": "TMP/xdg"}, func(_, tmp string) string { return filepath.Join(tmp, "xdg", "huggingface", "hub") }},
		{"hf-home", map[string]string{"HF_HOME": "TMP/hf", "XDG_CACHE_HOME": "TMP/xdg"}, func(_, tmp string) string { return filepath.Join(tmp, "hf", "hub") }},
		{"hf-home-tilde", map[string]string{"HF_HOME": "~/hfh"}, func(home, _ string) string { return filepath.Join(home, "hfh", "hub") }},
		{"legacy-hub-cache", map[string]string{"HUGGINGFACE_HUB_CACHE": "TMP/old", "HF_HOME": "TMP/hf"}, func(_, tmp string) string { return filepath.Join(tmp, "old") }},
		{"hub-cache-wins", map[string]string{"HF_HUB_CACHE": "TMP/hc", "HUGGINGFACE_HUB_CACHE": "TMP/old", "HF_HOME": "TMP/hf"}, func(_, tmp string) string { return filepath.Join(tmp, "hc") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := clearHFEnv(t)
			tmp := t.TempDir()
			for k, v := range tc.env {
				t.Setenv(k, strings.Replace(v, "TMP", tmp, 1))
			}
			got, err := hfHubCache()
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.want(home, tmp); got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

// TestResolveModel resolves --model from the cache alone (offline), where
// nothing may be downloaded.
func TestResolveModel(t *testing.T) {
	clearHFEnv(t)
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	withRef := fakeHubRepo(t, cache, "org/with-ref", commitA, true)
	fakeHubRepo(t, cache, "org/with-ref", commitB, false) // an older snapshot refs/main does not name
	single := fakeHubRepo(t, cache, "org/single", commitB, false)
	fakeHubRepo(t, cache, "org/two", commitA, false)
	fakeHubRepo(t, cache, "org/two", commitB, false)
	incomplete := fakeHubRepo(t, cache, "org/incomplete", commitA, true)
	if err := os.Remove(filepath.Join(incomplete, "config.json")); err != nil {
		t.Fatal(err)
	}
	badRef := fakeHubRepo(t, cache, "org/bad-ref", commitA, true)
	os.WriteFile(filepath.Join(filepath.Dir(filepath.Dir(badRef)), "refs", "main"), []byte("../../x"), 0o644)
	local := t.TempDir()
	file := filepath.Join(local, "file.txt")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	offline := []string{"downloads are off (--offline)", "mlxgo pull"}

	for _, tc := range []struct {
		name, arg, want string
		errs            []string
	}{
		{"local-directory", local, local, nil},
		{"refs-main", "org/with-ref", withRef, nil},
		{"only-snapshot", "org/single", single, nil},
		{"not-cached", "org/absent", "", append([]string{"--model org/absent: not in the Hugging Face cache " + cache, "mlxgo pull org/absent"}, offline...)},
		{"two-snapshots-no-ref", "org/two", "", append([]string{"no refs/main and 2 snapshots"}, offline...)},
		{"incomplete", "org/incomplete", "", append([]string{"has no config.json", "mlxgo pull org/incomplete"}, offline...)},
		{"bad-ref", "org/bad-ref", "", []string{`holds "../../x", want a commit hash`}},
		{"file", file, "", []string{file, "a file"}},
		{"not-a-repo-id", "a/b/c", "", []string{`"a/b/c"`, "no such directory", "org/name"}},
		{"bad-repo-id", "org/na..me", "", []string{`"org/na..me"`, `cannot hold "--" or ".."`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveModel(tc.arg, true)
			if tc.errs == nil {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q, want an error", got)
			}
			for _, w := range tc.errs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestGenerateFromHubCache runs mlxgo generate with a repo id whose cached
// snapshot holds a fixture checkpoint; a repo not there is refused under
// --offline and HF_HUB_OFFLINE=1.
func TestGenerateFromHubCache(t *testing.T) {
	clearHFEnv(t)
	hfHome := t.TempDir()
	t.Setenv("HF_HOME", hfHome)
	snap := fakeHubRepo(t, filepath.Join(hfHome, "hub"), "mlxgo-test/tied", commitA, true)
	linkFixtureModel(t, "tied-f32", snap)
	rc, stdout, stderr := mlxgo("generate", "--model", "mlxgo-test/tied", "--prompt-ids", "1,2,3", "--max-tokens", "3", "--backend", "cpu")
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	if !strings.Contains(stdout, "loaded "+snap+" on cpu") || len(generated(t, stdout)) != 3 {
		t.Errorf("want a load line naming %s and 3 generated ids, got:\n%s", snap, stdout)
	}

	s := hubtest.New(t)
	t.Setenv("HF_ENDPOINT", s.Hub.URL)
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"--offline"}, "downloads are off (--offline)"},
		{"1", nil, "downloads are off (HF_HUB_OFFLINE=1)"},
		{"true", nil, "downloads are off (HF_HUB_OFFLINE=1)"},
	} {
		t.Setenv("HF_HUB_OFFLINE", tc.env)
		for cmd, cmdArgs := range map[string][]string{
			"generate":     {"--prompt", "hi"},
			"chat":         nil,
			"batch":        {"--prompts", "x.jsonl"},
			"cache-prompt": {"--prompt", "hi", "--prompt-cache-file", "x.safetensors"},
		} {
			args := append(append([]string{cmd, "--model", "mlxgo-test/absent"}, cmdArgs...), tc.args...)
			rc, _, stderr := mlxgo(args...)
			if rc == 0 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "mlxgo pull mlxgo-test/absent") {
				t.Errorf("%q, HF_HUB_OFFLINE=%q: exit %d, stderr %q; want a failure saying %q and how to pull", args, tc.env, rc, stderr, tc.want)
			}
		}
	}
	if reqs := s.Requests(); len(reqs) != 0 {
		t.Errorf("offline runs sent %d requests to the Hub: %+v", len(reqs), reqs)
	}
}

// tiedRepo serves the tied-f32 fixture checkpoint as mlxgo-test/tied on a
// fake Hub (with a README mlx_lm would not fetch) and points HF_ENDPOINT
// and HF_HOME at it and a fresh directory; it returns the commit.
func tiedRepo(t *testing.T) (*hubtest.Server, string, string) {
	t.Helper()
	clearHFEnv(t)
	s := hubtest.New(t)
	files := map[string][]byte{"README.md": []byte("# tied\n")}
	for _, f := range []string{"config.json", "model.safetensors", "model.safetensors.index.json"} {
		b, err := os.ReadFile(filepath.Join(fixtures, "models", "tied-f32", f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = b
	}
	commit := s.Commit("mlxgo-test/tied", "main", files)
	hfHome := t.TempDir()
	t.Setenv("HF_HOME", hfHome)
	t.Setenv("HF_ENDPOINT", s.Hub.URL)
	return s, commit, filepath.Join(hfHome, "hub")
}

// TestGenerateDownloads runs generate --model ORG/NAME on an empty cache:
// it downloads the repo from the fake Hub, then generates what the fixture
// directory gives; the second run asks the Hub nothing.
func TestGenerateDownloads(t *testing.T) {
	s, commit, cache := tiedRepo(t)
	var log bytes.Buffer
	downloadLog = &log
	defer func() { downloadLog = os.Stderr }()
	args := []string{"--prompt-ids", "1,2,3", "--max-tokens", "4", "--backend", "cpu"}
	rc, stdout, stderr := mlxgo(append([]string{"generate", "--model", "mlxgo-test/tied"}, args...)...)
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s\ndownload log:\n%s", rc, stderr, log.String())
	}
	snap := filepath.Join(cache, "models--mlxgo-test--tied", "snapshots", commit)
	if !strings.Contains(stdout, "loaded "+snap+" on cpu") {
		t.Errorf("stdout does not name the downloaded snapshot %s:\n%s", snap, stdout)
	}
	for _, want := range []string{"mlxgo-test/tied is not in the Hugging Face cache " + cache, "downloading it from " + s.Hub.URL, "[2/3] model.safetensors: 644.0 kB downloaded"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("download log does not contain %q:\n%s", want, log.String())
		}
	}
	if _, err := os.Stat(filepath.Join(snap, "README.md")); err == nil {
		t.Errorf("README.md downloaded; mlx_lm's patterns leave it out")
	}
	rcDir, stdoutDir, stderrDir := mlxgo(append([]string{"generate", "--model", filepath.Join(fixtures, "models", "tied-f32")}, args...)...)
	if rcDir != 0 {
		t.Fatalf("generate on the fixture directory: exit %d:\n%s", rcDir, stderrDir)
	}
	if got, want := generated(t, stdout), generated(t, stdoutDir); !slices.Equal(got, want) || len(got) != 4 {
		t.Errorf("generated %v from the download, %v from the fixture directory", got, want)
	}

	s.Reset()
	log.Reset()
	rc, stdout2, stderr := mlxgo(append([]string{"generate", "--model", "mlxgo-test/tied", "--offline"}, args...)...)
	if rc != 0 || !slices.Equal(generated(t, stdout2), generated(t, stdout)) {
		t.Fatalf("second run: exit %d, stdout:\n%s\nstderr:\n%s", rc, stdout2, stderr)
	}
	if reqs := s.Requests(); len(reqs) != 0 || log.Len() != 0 {
		t.Errorf("second run sent %+v and logged %q; want nothing (the cache has it)", reqs, log.String())
	}
}

func TestPull(t *testing.T) {
	s, commit, cache := tiedRepo(t)
	snap := filepath.Join(cache, "models--mlxgo-test--tied", "snapshots", commit)
	rc, stdout, stderr := mlxgo("pull", "mlxgo-test/tied")
	if rc != 0 || stdout != snap+"\n" {
		t.Fatalf("exit %d, stdout %q (want the snapshot %s), stderr:\n%s", rc, stdout, snap, stderr)
	}
	for _, want := range []string{"pulling mlxgo-test/tied@main from " + s.Hub.URL + " into " + cache, "[1/3] config.json: 544 B downloaded",
		"3 files: 3 downloaded (649.7 kB received), 0 already in the cache"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr)
		}
	}
	rc, _, stderr = mlxgo("pull", "--revision", commit, "mlxgo-test/tied", "--allow-patterns", "config.json, README.md")
	if rc != 0 || !strings.Contains(stderr, "2 files: 1 downloaded (7 B received), 1 already in the cache") {
		t.Errorf("pull by commit with patterns: exit %d, stderr:\n%s", rc, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(snap, "README.md")); err != nil || string(b) != "# tied\n" {
		t.Errorf("README.md: %q, %v", b, err)
	}

	for _, tc := range []struct {
		args []string
		rc   int
		want string
	}{
		{[]string{}, 2, "give the repo to download"},
		{[]string{"a/b", "c/d"}, 2, `unexpected argument "c/d"`},
		{[]string{"a/b/c"}, 2, `repo id "a/b/c": want org/name`},
		{[]string{"org/x", "--allow-patterns", " , "}, 2, "holds no pattern"},
		{[]string{"org/x", "--revision", ""}, 2, "--revision is empty"},
		{[]string{"org/x", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"mlxgo-test/absent"}, 1, "mlxgo-test/absent@main: " + s.Hub.URL + "/api/models/mlxgo-test/absent/revision/main answered 401 Unauthorized: no such repo, or it is private or gated and needs a token: set HF_TOKEN"},
		{[]string{"mlxgo-test/tied", "--revision", "v9"}, 1, `the repo has no revision "v9"`},
		{[]string{"mlxgo-test/tied", "--allow-patterns", "*.gguf"}, 1, `none of its 4 files matches the allow patterns ["*.gguf"]`},
	} {
		rc, _, stderr := mlxgo(append([]string{"pull"}, tc.args...)...)
		if rc != tc.rc || !strings.Contains(stderr, tc.want) {
			t.Errorf("pull %q: exit %d, stderr %q; want exit %d and %q", tc.args, rc, stderr, tc.rc, tc.want)
		}
	}
	t.Setenv("HF_HUB_OFFLINE", "1")
	s.Reset()
	if rc, _, stderr := mlxgo("pull", "mlxgo-test/tied"); rc != 1 || !strings.Contains(stderr, "HF_HUB_OFFLINE is set") || len(s.Requests()) != 0 {
		t.Errorf("offline pull: exit %d, stderr %q, %d requests; want a refusal sending nothing", rc, stderr, len(s.Requests()))
	}
	t.Setenv("HF_HUB_OFFLINE", "")

	s.Token = "hf_secret"
	if rc, _, stderr := mlxgo("pull", "mlxgo-test/tied"); rc != 1 || !strings.Contains(stderr, "set HF_TOKEN") {
		t.Errorf("private repo without a token: exit %d, stderr %q", rc, stderr)
	}
	t.Setenv("HF_TOKEN", "hf_secret")
	if rc, _, stderr := mlxgo("pull", "mlxgo-test/tied"); rc != 0 {
		t.Errorf("private repo with HF_TOKEN: exit %d, stderr %q", rc, stderr)
	}
}

// TestPullWriteError runs mlxgo pull (this test binary standing in for it)
// under a file size limit, so writing the weights fails as on a full disk:
// the error names the file being written and why, and the bytes written
// stay in .incomplete for a later resume.
func TestPullWriteError(t *testing.T) {
	_, _, cache := tiedRepo(t)
	t.Setenv("MLXGO_TEST_AS_MLXGO", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// 200 blocks of 512 or 1024 bytes (the shell's unit): 100 or 200 kB, less than the 644 kB of weights.
	cmd := exec.Command("/bin/sh", "-c", `ulimit -f 200 && exec "$0" pull mlxgo-test/tied`, exe)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	blobs := filepath.Join(cache, "models--mlxgo-test--tied", "blobs")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1; stderr:\n%s", err, stderr.String())
	}
	out := stderr.String()
	if !strings.Contains(out, "model.safetensors: writing "+blobs) || !strings.Contains(out, ".incomplete: file too large (after ") {
		t.Errorf("stderr %q: want an error naming the .incomplete file in %s and the cause (file too large)", out, blobs)
	}
	incs, _ := filepath.Glob(filepath.Join(blobs, "*.incomplete"))
	if len(incs) != 1 {
		t.Fatalf("blobs/ holds %q, want the one .incomplete file kept", incs)
	}
	if st, err := os.Stat(incs[0]); err != nil || st.Size() == 0 || st.Size() >= 644007 {
		t.Errorf("%s: %v, %v; want the bytes written before the limit", incs[0], st, err)
	}
}
