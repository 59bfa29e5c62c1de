package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/server/loadtest"
)

const loadtestUsage = `usage: mlxgo loadtest (--model DIR|ORG/NAME [serve flags] | --url URL) [flags]

Load-tests an OpenAI-compatible server: --clients clients send --requests
requests in all (or stop after --duration), each chat or completions,
streamed (a --stream share of them) or not, with short, medium and long prompts (--prompt-words: 4, 48 or 400 words),
asking for --tokens/4 to --tokens tokens; --cancel of them are streamed and
cancelled after a chunk or two (the client closes the connection), and
--malformed of them are malformed bodies, which must be answered 400 (one
in seven is 2 MiB long: 413 from mlxgo serve, whose cap is 1 MiB), and
--slow of them come from slow clients (the body sent 32 bytes every 20 ms,
a stream left unread for 300 ms after its first chunk), which must still be
answered in full.
A 429 (queue full) is a deliberate rejection: the client waits its
Retry-After (at most 200 ms) and sends another request in its place (429s
do not count towards --requests).

With --model, mlxgo serve runs in this process on a free loopback port,
with the serve flags given (see mlxgo serve --help); with --url the load
goes to a server already running (mlxgo serve, mlx_lm.server,
llama-server), on loopback only unless --allow-remote.

It prints the counts, the aggregate throughput (completion tokens per
second of the whole run), the steady throughput (those delivered while
every client still had a request to send, before the tail of the run
where fewer clients load the server: exact when every request streams,
--stream 1), p50/p99 time to first token and inter-token latency (gaps
between streamed chunks), and the server's live arrays and bytes before the run and
once idle after it (from GET /health, which mlxgo serve answers with its
memory), and the engine's decode steps, rows a step and time in decode and
prefill during the run (from the same /health: mlxgo serve only). It exits
1 when any answer was an error (besides the deliberate 429s and the
malformed bodies' 400s) or when the server's arrays besides its prompt
cache are not back at their level before the run. --warmup N sends N short
completions one at a time before the clock starts, counted in nothing (a
fresh server's first request packs the weights).

Examples:
  mlxgo loadtest --model .venv/smollm2/SmolLM2-135M-Instruct-Q4_1-mlx --backend cpu
  mlxgo loadtest --model DIR --backend cpu --precision fast --warmup 1 --clients 8 --requests 32
  mlxgo loadtest --url http://127.0.0.1:8080 --clients 8 --requests 64
  make load-test

Flags:
`

type loadtestFlags struct {
	serveFlags
	url               string
	allowRemote       bool
	clients, requests int
	duration          time.Duration
	tokens            int
	cancel, malformed float64
	slow              float64
	stream            float64
	mixSeed           uint64
	warmup            int
	verbose           bool
	promptWords       string
	words             []int
}

func parseLoadtestFlags(args []string, stdout io.Writer) (*loadtestFlags, error) {
	f := &loadtestFlags{}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f.register(fs)
	fs.StringVar(&f.url, "url", "", "base URL of a running server, instead of --model (e.g. http://127.0.0.1:8080)")
	fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow a --url that is not on loopback")
	fs.IntVar(&f.clients, "clients", 64, "concurrent clients (>= 1)")
	fs.IntVar(&f.requests, "requests", 512, "requests in all (>= 1)")
	fs.DurationVar(&f.duration, "duration", 120*time.Second, "the longest the run may take (> 0)")
	fs.IntVar(&f.tokens, "tokens", 64, "the most tokens a request asks for (>= 1)")
	fs.Float64Var(&f.cancel, "cancel", 0.1, "share of requests cancelled mid-stream (0 to 1)")
	fs.Float64Var(&f.malformed, "malformed", 0.05, "share of malformed request bodies (0 to 1), one in seven over 2 MiB")
	fs.Float64Var(&f.slow, "slow", 0.05, "share of slow clients: the body sent 32 bytes every 20 ms, a stream left unread for 300 ms (0 to 1)")
	fs.Float64Var(&f.stream, "stream", 0.5, "share of the requests (besides the cancelled and malformed ones) that stream (0 to 1)")
	fs.Uint64Var(&f.mixSeed, "mix-seed", 1, "seeds the mix of requests (the i-th request sent is the same whatever the number of clients)")
	fs.IntVar(&f.warmup, "warmup", 0, "requests sent one at a time before the run, counted in nothing (a fresh server's first request packs the weights)")
	fs.StringVar(&f.promptWords, "prompt-words", "4,48,400", "prompt lengths in words, comma-separated (each request picks one)")
	fs.BoolVar(&f.verbose, "verbose", false, "print the in-process server's line per request to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, loadtestUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	var err error
	switch {
	case (f.url == "") == (f.model == ""):
		err = usagef("give --model (a server in this process) or --url (a running server), one of them")
	case f.url != "" && f.cpuProfile != "":
		err = usagef("--cpuprofile profiles the server in this process: give --model, not --url")
	case f.clients < 1:
		err = usagef("--clients %d: want >= 1", f.clients)
	case f.requests < 1:
		err = usagef("--requests %d: want >= 1", f.requests)
	case f.duration <= 0:
		err = usagef("--duration %v: want > 0", f.duration)
	case f.tokens < 1:
		err = usagef("--tokens %d: want >= 1", f.tokens)
	case f.warmup < 0:
		err = usagef("--warmup %d: want >= 0", f.warmup)
	case !(f.cancel >= 0 && f.malformed >= 0 && f.slow >= 0 && f.cancel+f.malformed+f.slow <= 1):
		err = usagef("--cancel %v, --malformed %v, --slow %v: want shares >= 0 adding up to at most 1", f.cancel, f.malformed, f.slow)
	case !(f.stream >= 0 && f.stream <= 1):
		err = usagef("--stream %v: want a share from 0 to 1", f.stream)
	}
	if err != nil {
		return nil, err
	}
	ids, err := parseIDs(f.promptWords)
	if err != nil || slices.Contains(ids, 0) {
		return nil, usagef("--prompt-words %q: want comma-separated word counts >= 1", f.promptWords)
	}
	for _, n := range ids {
		f.words = append(f.words, int(n))
	}
	if f.url != "" {
		if err := checkLoopback(f.url, f.allowRemote); err != nil {
			return nil, err
		}
		return f, nil
	}
	if err := f.checkServe(); err != nil {
		return nil, err
	}
	return f, nil
}

// checkLoopback refuses a URL whose host is not a loopback address.
func checkLoopback(url string, allow bool) error {
	rest, ok := strings.CutPrefix(url, "http://")
	if !ok {
		return usagef("--url %q: want http://HOST:PORT", url)
	}
	host := strings.Split(strings.Split(rest, "/")[0], ":")[0]
	if allow || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return usagef("--url %q is not on loopback: give --allow-remote to load another machine", url)
	}
	return nil
}

func cmdLoadtest(args []string, stdout, stderr io.Writer) int {
	return runCommand("loadtest", args, stdout, stderr, parseLoadtestFlags, runLoadtest)
}

func runLoadtest(f *loadtestFlags, stdout, stderr io.Writer) error {
	url := f.url
	if url == "" {
		stopProfile, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		var log io.Writer = io.Discard
		if f.verbose {
			log = stderr
		}
		srv, closeSrv, err := openServer(&f.serveFlags, stdout, stderr, log)
		if err != nil {
			return err
		}
		defer closeSrv()
		hs := srv.HTTPServer(ln.Addr().String())
		go hs.Serve(ln)
		defer hs.Close()
		url = "http://" + ln.Addr().String()
	}
	fmt.Fprintf(stdout, "load: %d clients, %d requests (at most %v), up to %d tokens each, %.0f%% cancelled mid-stream, %.0f%% malformed, %.0f%% slow, against %s\n",
		f.clients, f.requests, f.duration, f.tokens, 100*f.cancel, 100*f.malformed, 100*f.slow, url)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := loadtest.Run(ctx, loadtest.Options{URL: url, Clients: f.clients, Requests: f.requests, Duration: f.duration,
		MaxTokens: f.tokens, Cancel: f.cancel, Malformed: f.malformed, Slow: f.slow, Stream: f.stream, Seed: f.mixSeed, PromptWords: f.words, Warmup: f.warmup})
	if err != nil {
		return err
	}
	rep.Write(stdout)
	if err := rep.Check(); err != nil {
		return fmt.Errorf("FAIL: %w", err)
	}
	fmt.Fprintln(stdout, "load test: ok")
	return nil
}
