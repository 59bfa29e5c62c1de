package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// clearHFEnv unsets every variable hfHubCache reads and points HOME at a
// fresh directory, so the test sees only what it sets.
func clearHFEnv(t *testing.T) string {
	t.Helper()
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"} {
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

func TestResolveModel(t *testing.T) {
	clearHFEnv(t)
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	withRef := fakeHubRepo(t, cache, "org/with-ref", "0123abcd", true)
	fakeHubRepo(t, cache, "org/with-ref", "old999", false) // an older snapshot refs/main does not name
	single := fakeHubRepo(t, cache, "org/single", "feed42", false)
	fakeHubRepo(t, cache, "org/two", "aaa", false)
	fakeHubRepo(t, cache, "org/two", "bbb", false)
	incomplete := fakeHubRepo(t, cache, "org/incomplete", "c0ffee", true)
	if err := os.Remove(filepath.Join(incomplete, "config.json")); err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	file := filepath.Join(local, "file.txt")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, arg, want string
		errs            []string
	}{
		{"local-directory", local, local, nil},
		{"refs-main", "org/with-ref", withRef, nil},
		{"only-snapshot", "org/single", single, nil},
		{"not-cached", "org/absent", "", []string{"org/absent", cache, "huggingface-cli download org/absent", "hf download org/absent"}},
		{"two-snapshots-no-ref", "org/two", "", []string{"no refs/main", "2 snapshots", "huggingface-cli download org/two"}},
		{"incomplete", "org/incomplete", "", []string{"no config.json", "huggingface-cli download org/incomplete"}},
		{"file", file, "", []string{file, "a file"}},
		{"not-a-repo-id", "a/b/c", "", []string{`"a/b/c"`, "no such directory", "org/name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveModel(tc.arg)
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
// snapshot holds a fixture checkpoint.
func TestGenerateFromHubCache(t *testing.T) {
	clearHFEnv(t)
	hfHome := t.TempDir()
	t.Setenv("HF_HOME", hfHome)
	snap := fakeHubRepo(t, filepath.Join(hfHome, "hub"), "mlxgo-test/tied", "5eed", true)
	linkFixtureModel(t, "tied-f32", snap)
	rc, stdout, stderr := mlxgo("generate", "--model", "mlxgo-test/tied", "--prompt-ids", "1,2,3", "--max-tokens", "3", "--backend", "cpu")
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	if !strings.Contains(stdout, "loaded "+snap+" on cpu") || len(generated(t, stdout)) != 3 {
		t.Errorf("want a load line naming %s and 3 generated ids, got:\n%s", snap, stdout)
	}
	rc, _, stderr = mlxgo("generate", "--model", "mlxgo-test/absent", "--prompt", "hi")
	if rc == 0 || !strings.Contains(stderr, "huggingface-cli download mlxgo-test/absent") {
		t.Errorf("absent repo: got exit %d, stderr %q; want a failure saying how to download it", rc, stderr)
	}
}
