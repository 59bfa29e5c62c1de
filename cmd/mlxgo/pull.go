package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mlxgo/mlxgo/hub"
)

const pullUsage = `usage: mlxgo pull ORG/NAME [--revision R] [--allow-patterns P,...]

Downloads a Hugging Face Hub model repo into the Hugging Face cache
($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) in
huggingface_hub's layout, so mlxgo, mlx_lm and huggingface_hub all find it,
and prints the snapshot directory. By default it fetches the files mlx_lm
needs (` + "`*.json, model*.safetensors, tokenizer.model, *.tiktoken, tiktoken.model, *.txt, *.jsonl, *.jinja`" + `);
files already in the cache are not fetched again, and a download cut off
is resumed where it stopped the next time. LFS files are checked against
their sha256, others against their git sha1; a file over 50 GB is refused.

HF_TOKEN (or the token file of huggingface-cli login) is sent to the Hub for
private and gated repos; HF_ENDPOINT names another Hub (a mirror);
HF_HUB_OFFLINE=1 refuses to download.

Examples:
  mlxgo pull mlx-community/SmolLM2-135M-Instruct-4bit
  mlxgo pull mlx-community/Llama-3.2-1B-Instruct-4bit --revision main
  mlxgo pull org/name --allow-patterns 'config.json,*.safetensors,tokenizer*'
  mlxgo generate --model mlx-community/SmolLM2-135M-Instruct-4bit --prompt hi

Flags:
`

// pullFlags are the parsed arguments of mlxgo pull.
type pullFlags struct {
	repo, revision string
	patterns       []string // nil: hub.DefaultAllowPatterns
}

func parsePullFlags(args []string, stdout io.Writer) (*pullFlags, error) {
	f := &pullFlags{}
	fs := flag.NewFlagSet("pull", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&f.revision, "revision", "main", "branch, tag or commit hash to download")
	allow := fs.String("allow-patterns", "", "comma-separated fnmatch patterns of the files to download, as huggingface_hub's allow_patterns ('*' matches '/' too; 'dir/' takes a folder); default: the files mlx_lm needs")
	// The repo id may come before or after the flags.
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, pullUsage)
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(rest) == 0:
		return nil, usagef("give the repo to download: mlxgo pull ORG/NAME")
	case len(rest) > 1:
		return nil, usagef("unexpected argument %q: mlxgo pull takes one repo id", rest[1])
	}
	f.repo = rest[0]
	if err := hub.CheckRepoID(f.repo); err != nil {
		return nil, usagef("%v", err)
	}
	if f.revision == "" {
		return nil, usagef("--revision is empty: want a branch, tag or commit hash")
	}
	if *allow != "" {
		for _, p := range strings.Split(*allow, ",") {
			if p = strings.TrimSpace(p); p != "" {
				f.patterns = append(f.patterns, p)
			}
		}
		if len(f.patterns) == 0 {
			return nil, usagef("--allow-patterns %q holds no pattern", *allow)
		}
		if _, err := hub.CompilePatterns(f.patterns); err != nil {
			return nil, usagef("--allow-patterns: %v", err)
		}
	}
	return f, nil
}

func runPull(f *pullFlags, stdout, stderr io.Writer) error {
	if hub.Offline() {
		return fmt.Errorf("%s: HF_HUB_OFFLINE is set, so nothing may be downloaded; unset it to pull", f.repo)
	}
	c, err := hub.NewClient()
	if err != nil {
		return err
	}
	c.Progress, c.Terminal = stderr, isTerminal(stderr)
	fmt.Fprintf(stderr, "pulling %s@%s from %s into %s\n", f.repo, f.revision, c.Endpoint, c.Cache)
	snap, err := c.Download(context.Background(), f.repo, f.revision, f.patterns)
	if err != nil {
		return err
	}
	st := c.Stats
	fmt.Fprintf(stderr, "%d files: %d downloaded (%s received", st.Files, st.Fetched, hub.FormatSize(st.Bytes))
	if st.Resumed > 0 {
		fmt.Fprintf(stderr, ", %d resumed", st.Resumed)
	}
	fmt.Fprintf(stderr, "), %d already in the cache\n", st.Reused)
	fmt.Fprintln(stdout, snap)
	return nil
}

func cmdPull(args []string, stdout, stderr io.Writer) int {
	return runCommand("pull", args, stdout, stderr, parsePullFlags, runPull)
}
