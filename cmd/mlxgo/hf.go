package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// repoIDPattern is a Hugging Face model repository id, "org/name" (letters,
// digits, '-', '_' and '.'; no leading '.' or '-').
var repoIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// hfHubCache is the Hugging Face hub cache directory, as huggingface_hub
// chooses it: $HF_HUB_CACHE, else the legacy $HUGGINGFACE_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
func hfHubCache() (string, error) {
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(v); d != "" {
			return expandHome(d)
		}
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		d, err := expandHome(d)
		return filepath.Join(d, "hub"), err
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		d, err := expandHome(d)
		return filepath.Join(d, "huggingface", "hub"), err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory to find the Hugging Face cache in (set HF_HOME or HF_HUB_CACHE): %w", err)
	}
	return filepath.Join(home, ".cache", "huggingface", "hub"), nil
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

// resolveModel turns --model into a model directory. An existing directory
// is used as it is. Otherwise an "org/name" repository id resolves to the
// snapshot that refs/main names in the Hugging Face hub cache
// (models--org--name/snapshots/<commit>/); when the model is not there, the
// error says how to download it.
func resolveModel(arg string) (string, error) {
	if st, err := os.Stat(arg); err == nil {
		if !st.IsDir() {
			return "", usagef("--model %q: a file, want a model directory or a Hugging Face repo id (org/name)", arg)
		}
		return arg, nil
	}
	if !repoIDPattern.MatchString(arg) {
		return "", usagef("--model %q: no such directory, and not a Hugging Face repo id (org/name)", arg)
	}
	cache, err := hfHubCache()
	if err != nil {
		return "", err
	}
	download := fmt.Sprintf("download it with `huggingface-cli download %s` (or `hf download %s`), or pass a model directory", arg, arg)
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(arg, "/", "--"))
	if _, err := os.Stat(repo); err != nil {
		return "", fmt.Errorf("--model %s: not a directory, and the Hugging Face cache %s does not have this model (no %s); %s", arg, cache, repo, download)
	}
	ref, err := os.ReadFile(filepath.Join(repo, "refs", "main"))
	var snap string
	switch {
	case err == nil:
		commit := strings.TrimSpace(string(ref))
		if commit == "" || strings.ContainsAny(commit, `/\`) || commit == "." || commit == ".." {
			return "", fmt.Errorf("--model %s: %s holds %q, want a commit hash; %s", arg, filepath.Join(repo, "refs", "main"), commit, download)
		}
		snap = filepath.Join(repo, "snapshots", commit)
	case errors.Is(err, fs.ErrNotExist):
		// No refs/main (a download of a single revision): take the only snapshot.
		entries, _ := os.ReadDir(filepath.Join(repo, "snapshots"))
		var dirs []string
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, e.Name())
			}
		}
		if len(dirs) != 1 {
			return "", fmt.Errorf("--model %s: %s has no refs/main and %d snapshots (want exactly one to choose it); %s", arg, repo, len(dirs), download)
		}
		snap = filepath.Join(repo, "snapshots", dirs[0])
	default:
		return "", fmt.Errorf("--model %s: %w", arg, err)
	}
	if _, err := os.Stat(filepath.Join(snap, "config.json")); err != nil {
		return "", fmt.Errorf("--model %s: the cached snapshot %s has no config.json (an incomplete download?); %s", arg, snap, download)
	}
	return snap, nil
}
