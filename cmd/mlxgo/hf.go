package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mlxgo/mlxgo/hub"
)

// downloadLog is where --model ORG/NAME downloads show their progress
// (tests replace it).
var downloadLog io.Writer = os.Stderr

// hfHubCache is the Hugging Face hub cache directory (hub.CacheDir).
func hfHubCache() (string, error) { return hub.CacheDir() }

// registerOffline adds --offline, which every command taking --model has.
func registerOffline(fs *flag.FlagSet, offline *bool) {
	fs.BoolVar(offline, "offline", false, "never download: --model ORG/NAME must be in the Hugging Face cache (as HF_HUB_OFFLINE=1)")
}

// resolveModel turns --model into a model directory, as mlx_lm's _download
// does: an existing directory is used as it is; an "org/name" repo id
// resolves to the snapshot refs/main names in the Hugging Face hub cache,
// and when the cache does not have it the repo is downloaded first (the
// files mlx_lm fetches, hub.DefaultAllowPatterns). offline (--offline) or
// HF_HUB_OFFLINE=1 forbids the download. Unlike mlx_lm, a cached snapshot
// is used without asking the Hub for a newer commit: `mlxgo pull` updates.
func resolveModel(arg string, offline bool) (string, error) {
	dir, err := cachedModel(arg)
	if err == nil || !errors.Is(err, hub.ErrNotCached) {
		return dir, err
	}
	if offline || hub.Offline() {
		why := "--offline"
		if !offline {
			why = "HF_HUB_OFFLINE=1"
		}
		return "", fmt.Errorf("%v; downloads are off (%s): run `mlxgo pull %s` where the Hub is reachable, or pass a model directory", err, why, arg)
	}
	c, err := hub.NewClient()
	if err != nil {
		return "", fmt.Errorf("--model %s: %w", arg, err)
	}
	c.Progress, c.Terminal = downloadLog, isTerminal(downloadLog)
	fmt.Fprintf(downloadLog, "mlxgo: %s is not in the Hugging Face cache %s; downloading it from %s (the files mlx_lm needs)\n", arg, c.Cache, c.Endpoint)
	snap, err := c.Download(context.Background(), arg, "main", nil)
	if err != nil {
		return "", fmt.Errorf("--model %s: %w", arg, err)
	}
	if _, err := os.Stat(snap + "/config.json"); err != nil {
		return "", fmt.Errorf("--model %s: downloaded %s, but it has no config.json: not a model repo", arg, snap)
	}
	return snap, nil
}

// cachedModel is resolveModel without downloading: an existing directory,
// or the cached snapshot of an org/name repo id; errors wrap
// hub.ErrNotCached when the repo is not in the cache.
func cachedModel(arg string) (string, error) {
	if st, err := os.Stat(arg); err == nil {
		if !st.IsDir() {
			return "", usagef("--model %q: a file, want a model directory or a Hugging Face repo id (org/name)", arg)
		}
		return arg, nil
	}
	if err := hub.CheckRepoID(arg); err != nil {
		return "", usagef("--model %q: no such directory, and not a Hugging Face repo id (org/name): %v", arg, err)
	}
	cache, err := hfHubCache()
	if err != nil {
		return "", err
	}
	snap, err := hub.Snapshot(cache, arg, "main")
	if err != nil {
		return "", fmt.Errorf("--model %w", err) // hub's errors begin with the repo id
	}
	return snap, nil
}
