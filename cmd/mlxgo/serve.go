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
	"strconv"
	"syscall"
	"time"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/server"
)

const serveUsage = `usage: mlxgo serve --model DIR|ORG/NAME [--host 127.0.0.1] [--port 8080] [flags]

Serves the model over HTTP with OpenAI's API, as mlx_lm.server and
llama-server do:
  POST /v1/chat/completions   messages through the model's chat template
  POST /v1/completions        a prompt: text, or an array of token ids
  GET  /v1/models             the model served (its id is --model as given)
  GET  /health                {"status": "ok"}, with the backend's live memory
Requests take max_tokens (or max_completion_tokens), temperature, top_p,
top_k, min_p, repetition_penalty, seed, stop (strings, never emitted),
logprobs / top_logprobs, stream and stream_options.include_usage; n must
be 1. The flags below give the defaults of requests that leave a setting
out (--max-tokens, --temp, ...). A request with a seed samples from a random
state of its own: its text is mlxgo generate --seed's.

Requests are decoded together (continuous batching): up to
--max-concurrency sequences decode at once and new ones join between
decode steps, --prefill-concurrency prompts prefill at once, in chunks
of --prefill-step tokens and of at most --prefill-budget tokens in all
between two decode steps while sequences decode (a long prompt does not
stall them); up to --queue-size more wait, and beyond that the server
answers 429 with Retry-After. A client that disconnects cancels its
sequence at once.
Finished sequences' KV caches are kept, up to --prompt-cache-bytes, and a
request whose prompt starts with one of them prefills only the rest
(usage.prompt_tokens_details.cached_tokens says how many were reused).
With --prompt-cache-dir they outlive the server: saved there as prompt
cache files (mlx_lm's format) when evicted and at shutdown, loaded at
start; a file there made for another model stops the start, naming it.
--adapter-path puts LoRA or DoRA adapters on the model, as for generate.
--kv-cache and its flags choose the rows' caches as for mlxgo batch: the
full cache (the default; --batch-cache shared|per-row|auto as there), a
rotating window (--max-kv-size), or one cache
of its own per row for --kv-bits and --kv-cache quantized|turbo; the
prompt cache holds full caches only and is off with the other kinds.

Request bodies are capped at --max-body-bytes (413 beyond); headers must
arrive within 10 s and the whole request within 60 s; a client that reads
nothing for --write-timeout is dropped. Errors are OpenAI's error JSON.
Stderr gets one line per request: id, route, status, prompt, cached and
completion tokens, finish reason, time to first token, total time, mean
inter-token latency.

Examples:
  mlxgo serve --model smollm2-mlx
  mlxgo serve --model DIR --port 9000 --max-concurrency 16 --temp 0.7
  mlxgo serve --model smollm2-mlx --batch-cache shared   # mlx_lm's shared batch cache on the cpu backend
  mlxgo serve --model smollm2-mlx --backend cpu --precision fast   # int8 matmuls on packed weights (AVX-512 VNNI)
  mlxgo serve --model smollm2-mlx --backend cpu --precision fast --kv-dtype float16   # a float32 model's caches in float16
  curl localhost:8080/v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}]}'

Flags:
`

// serveFlags are the parsed flags of mlxgo serve.
type serveFlags struct {
	sampleFlags
	host                    string
	port                    int
	maxConcurrency, prefill int
	prefillBudget           int
	queue                   int
	promptCacheBytes        int64
	promptCacheDir          string
	maxBodyBytes            int64
	writeTimeout            time.Duration
	think, noThink          bool
	given                   string // --model as given: the served model's id
	kvCacheFlags
}

// register adds the model, sampling and serving flags to fs.
func (f *serveFlags) register(fs *flag.FlagSet) {
	f.sampleFlags.register(fs, 512)
	fs.IntVar(&f.maxConcurrency, "max-concurrency", 8, "most sequences decoding at once (>= 1)")
	fs.IntVar(&f.prefill, "prefill-concurrency", 4, "most prompts prefilled at once (>= 1; at most --max-concurrency)")
	fs.IntVar(&f.prefillBudget, "prefill-budget", server.DefaultPrefillBudget, "most prompt tokens prefilled between two decode steps while sequences decode, over all prompts prefilling (0: no budget, --prefill-step tokens per prompt)")
	fs.IntVar(&f.queue, "queue-size", 32, "most requests waiting beyond --max-concurrency (>= 0); more are answered 429")
	fs.Int64Var(&f.promptCacheBytes, "prompt-cache-bytes", 512<<20, "most bytes of finished sequences' KV caches kept for prefix reuse (0: none)")
	fs.StringVar(&f.promptCacheDir, "prompt-cache-dir", "", "keep the prompt cache across restarts in this directory: entries evicted from it, and all at shutdown, are saved there as prompt cache files (mlx_lm's format; at most --prompt-cache-bytes of them), and the files there are loaded at start")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted (>= 1024); larger ones are answered 413")
	fs.DurationVar(&f.writeTimeout, "write-timeout", 60*time.Second, "drop a client that reads nothing for this long (> 0)")
	fs.BoolVar(&f.think, "think", false, "set enable_thinking=true in the chat template (templates with that switch only)")
	fs.BoolVar(&f.noThink, "no-think", false, "set enable_thinking=false in the chat template (templates with that switch only)")
	f.registerKV(fs)
	f.registerKVDType(fs)
	f.registerBatchCache(fs)
}

// checkServe validates the flags and resolves --model.
func (f *serveFlags) checkServe() error {
	if err := f.check(); err != nil {
		return err
	}
	f.setBackend(f.backend, f.precision)
	var err error
	switch {
	case f.port < 0 || f.port > 65535:
		err = usagef("--port %d: want 0 to 65535", f.port)
	case f.maxConcurrency < 1:
		err = usagef("--max-concurrency %d: want >= 1", f.maxConcurrency)
	case f.prefill < 1:
		err = usagef("--prefill-concurrency %d: want >= 1", f.prefill)
	case f.prefillBudget < 0:
		err = usagef("--prefill-budget %d: want >= 0 (0: none)", f.prefillBudget)
	case f.queue < 0:
		err = usagef("--queue-size %d: want >= 0", f.queue)
	case f.promptCacheBytes < 0:
		err = usagef("--prompt-cache-bytes %d: want >= 0", f.promptCacheBytes)
	case f.promptCacheDir != "" && f.promptCacheBytes == 0:
		err = usagef("--prompt-cache-dir needs a prompt cache: --prompt-cache-bytes is 0")
	case f.maxBodyBytes < 1024:
		err = usagef("--max-body-bytes %d: want >= 1024", f.maxBodyBytes)
	case f.writeTimeout <= 0:
		err = usagef("--write-timeout %v: want > 0", f.writeTimeout)
	case f.think && f.noThink:
		err = usagef("--think and --no-think are mutually exclusive")
	case kvErr(&f.kvCacheFlags) != nil:
		err = kvErr(&f.kvCacheFlags)
	case f.kvFlagsSet() && f.promptCacheDir != "":
		err = usagef("--prompt-cache-dir with %s: the prompt cache holds full caches only (it is off with other kinds)", kvDescription(f.cacheOptions()))
	}
	if err != nil {
		return err
	}
	f.given = f.model
	f.model, err = resolveModel(f.model, f.offline)
	return err
}

func parseServeFlags(args []string, stdout io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f.register(fs)
	fs.StringVar(&f.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&f.port, "port", 8080, "port to listen on (0: any free port, printed)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, serveUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if err := f.checkServe(); err != nil {
		return nil, err
	}
	return f, nil
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	return runCommand("serve", args, stdout, stderr, parseServeFlags, runServe)
}

// defaultServeContext bounds prompt plus completion tokens for a model
// whose config.json gives no max_position_embeddings.
const defaultServeContext = 32768

// serveStop, when not nil, stops mlxgo serve when closed (tests; a signal
// stops it otherwise).
var serveStop chan struct{}

func runServe(f *serveFlags, stdout, stderr io.Writer) error {
	stopCh := serveStop // read before "serving": a test may then start another server
	ln, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.port)))
	if err != nil {
		return usagef("--host %s --port %d: %v", f.host, f.port, err)
	}
	defer ln.Close()
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	srv, closeSrv, err := openServer(f, stdout, stderr, stderr)
	if err != nil {
		return err
	}
	defer closeSrv()
	id := f.given
	hs := srv.HTTPServer(ln.Addr().String())
	fmt.Fprintf(stdout, "serving %s on http://%s (POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health)\n", id, ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if stopCh != nil {
		go func() {
			select {
			case <-stopCh:
				stop()
			case <-ctx.Done():
			}
		}()
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "mlxgo serve: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Close() // in-flight requests end now, so Shutdown need not wait for them
	hs.Shutdown(sctx)
	return nil
}

// openServer loads the model and its text side and starts a server.Server
// (its request lines to log); close frees them.
func openServer(f *serveFlags, stdout, stderr, log io.Writer) (*server.Server, func(), error) {
	cfg, err := checkpoint.LoadConfig(f.model)
	if err != nil {
		return nil, nil, fmt.Errorf("--model %s: %w", f.model, err)
	}
	if !hasTokenizer(f.model) {
		return nil, nil, usagef("%s has no tokenizer.json, which mlxgo serve needs (its API is text): copy tokenizer.json and tokenizer_config.json from the model's Hugging Face repo into it", f.model)
	}
	tm, err := openText(f.model, cfg, false, f.think, f.noThink, "", stderr)
	if err != nil {
		return nil, nil, err
	}
	b, m, err := openModel(&f.sampleFlags, stdout, stderr)
	if err != nil {
		return nil, nil, err
	}
	free := func() {
		b.Do(func() error { return m.Close() })
		b.Close()
	}
	var model generate.BatchModel = m
	cacheBytes := f.promptCacheBytes
	co, err := f.batchOptions(f.backend)
	if err != nil {
		free()
		return nil, nil, err
	}
	var view minicpm5.CacheView
	if f.kvFlagsSet() || co.PerRow || co.KVDType != 0 {
		// Rows of the kind asked for (nn.NewBatchCache).
		view, err = m.WithCache(co)
		if err == nil {
			err = view.CheckBatch()
		}
		if err != nil {
			free()
			return nil, nil, usagef("%s: %v", kvDescription(co), err)
		}
		model = view
	}
	if f.kvFlagsSet() && cacheBytes > 0 {
		// The prefix cache copies full caches only.
		fmt.Fprintf(stderr, "note: %s: the prompt cache holds full caches only; it is off\n", kvDescription(co))
		cacheBytes = 0
	}
	ctxLen := cfg.MaxPositionEmbeddings
	if ctxLen == 0 {
		// No bound from the model: a prompt must not size the KV cache freely.
		ctxLen = defaultServeContext
		fmt.Fprintf(stderr, "note: %s/config.json has no max_position_embeddings; mlxgo serve bounds prompt plus completion at %d tokens\n", f.model, ctxLen)
	}
	var shape promptcache.Shape
	if f.promptCacheDir != "" {
		if err := os.MkdirAll(f.promptCacheDir, 0o755); err != nil {
			free()
			return nil, nil, usagef("--prompt-cache-dir: %v", err)
		}
		dts, err := m.CacheDTypes()
		if view.Model != nil {
			dts, err = view.CacheDTypes() // --kv-dtype's
		}
		if err != nil {
			free()
			return nil, nil, err
		}
		shape = promptcache.ModelShape(m.Config(), dts)
	}
	queue, budget := f.queue, f.prefillBudget
	if queue == 0 {
		queue = -1 // server.Config's "none"; its 0 is the default
	}
	if budget == 0 {
		budget = -1
	}
	srv, err := server.New(server.Config{
		Model: model, ModelID: f.given, Text: tm, ContextLength: ctxLen,
		Defaults: server.Defaults{MaxTokens: f.maxTokens, Temp: f.temp, TopP: f.topP, TopK: f.topK, MinP: f.minP,
			RepetitionPenalty: f.repPenalty, RepetitionContext: f.repContext},
		Seed: f.seed, MaxConcurrency: f.maxConcurrency, PrefillConcurrency: min(f.prefill, f.maxConcurrency),
		QueueSize: queue, PrefillStep: f.prefillStep, PrefillBudget: budget, PromptCacheBytes: cacheBytes,
		PromptCacheDir: f.promptCacheDir, PromptCacheShape: shape,
		MaxBodyBytes: f.maxBodyBytes, WriteTimeout: f.writeTimeout, Log: log,
	})
	if err != nil {
		free()
		return nil, nil, err
	}
	return srv, func() { srv.Close(); free() }, nil
}
