package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// Defaults are the generation settings of requests that do not give them.
type Defaults struct {
	MaxTokens         int     // max_tokens (>= 1)
	Temp              float64 // temperature (0: greedy)
	TopP              float64 // top_p (0 or 1: off)
	TopK              int     // top_k (0: off)
	MinP              float64 // min_p (0: off)
	RepetitionPenalty float64 // repetition_penalty (0: off)
	RepetitionContext int     // repetition_context_size (>= 1)
}

// Config configures a Server.
type Config struct {
	// Model is the model; the server's engine goroutine is the only user
	// of it and of its backend while the server runs.
	Model generate.BatchModel
	// ModelID is the model's name in /v1/models and in responses; a
	// request naming another model is answered 404.
	ModelID string
	// Text is the model's tokenizer, chat template and stop tokens.
	Text *chat.Text
	// ContextLength bounds prompt plus generated tokens (the model's
	// max_position_embeddings); 0 means no bound.
	ContextLength int
	// Defaults are the settings of requests that leave them out.
	Defaults Defaults
	// Seed seeds the random state shared by sampled requests without a
	// seed of their own (a request's seed gives it a state of its own).
	Seed uint64
	// MaxConcurrency is the most sequences decoding at once; 0 means 8.
	MaxConcurrency int
	// PrefillConcurrency is the most prompts prefilled at once; 0 means
	// min(4, MaxConcurrency).
	PrefillConcurrency int
	// QueueSize is the most requests waiting beyond MaxConcurrency; more
	// are answered 429 with Retry-After. 0 means 32; negative means none.
	QueueSize int
	// PrefillStep is the prompt chunk length; 0 means 2048.
	PrefillStep int
	// PrefillBudget bounds the prompt tokens prefilled between two decode
	// steps while sequences decode (generate.BatchOptions.PrefillBudget),
	// so that a long prompt does not stall them; 0 means 256, negative
	// means no budget (PrefillStep tokens per prompt every step).
	PrefillBudget int
	// PromptCacheBytes bounds the prefix cache of finished sequences'
	// keys and values (0: no prefix cache).
	PromptCacheBytes int64
	// PromptCacheDir, when not "", keeps the prefix cache across restarts:
	// entries evicted from it, and every entry at Close, are saved there
	// as prompt cache files (mlx_lm's format, package promptcache, with
	// the metadata "model", ModelID, and "tokens", the token ids held),
	// the files taking at most PromptCacheBytes (the least recently
	// written deleted first), and New loads the files there. A file New
	// cannot read, or one made for another model (ErrOtherModel: another
	// ModelID, or caches that do not fit PromptCacheShape), fails New
	// with an error naming it.
	PromptCacheDir string
	// PromptCacheShape is the shape of the model's caches
	// (promptcache.ModelShape), which files of PromptCacheDir must have.
	PromptCacheShape promptcache.Shape
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// WriteTimeout bounds each write to a client (a client that reads
	// nothing for that long is dropped and its sequence cancelled); 0
	// means 60 s.
	WriteTimeout time.Duration
	// ReadTimeout bounds reading a whole request, headers and body
	// (HTTPServer; the headers alone get at most 10 s); 0 means 60 s.
	ReadTimeout time.Duration
	// Log receives one line per request; nil discards them.
	Log io.Writer
}

// DefaultPrefillBudget is the default Config.PrefillBudget.
const DefaultPrefillBudget = 256

// DefaultMaxBodyBytes is the default cap on a request body: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// prefillPadLimit is the engine's generate.BatchOptions.PrefillPadLimit
// (see New).
const prefillPadLimit = 8

// Server answers OpenAI's chat and completions API with continuous
// batching over one model. Make it with New, serve Handler (or
// HTTPServer), and Close it.
type Server struct {
	cfg      Config
	eng      *engine
	capacity int64
	inflight atomic.Int64
	created  int64
	logMu    sync.Mutex
}

// New starts a server's engine.
func New(cfg Config) (*Server, error) {
	if cfg.Model == nil || cfg.Text == nil {
		return nil, errors.New("server: a model and its text side (tokenizer) are required")
	}
	d := &cfg.Defaults
	switch {
	case d.MaxTokens < 1:
		return nil, fmt.Errorf("server: default max tokens %d, want >= 1", d.MaxTokens)
	case d.RepetitionContext < 1:
		return nil, fmt.Errorf("server: default repetition context size %d, want >= 1", d.RepetitionContext)
	case cfg.MaxConcurrency < 0 || cfg.PrefillConcurrency < 0 || cfg.PromptCacheBytes < 0 || cfg.MaxBodyBytes < 0 || cfg.PrefillStep < 0:
		return nil, errors.New("server: negative limit in the configuration")
	}
	if cfg.MaxConcurrency == 0 {
		cfg.MaxConcurrency = 8
	}
	if cfg.PrefillConcurrency == 0 {
		cfg.PrefillConcurrency = min(4, cfg.MaxConcurrency)
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 32
	}
	if cfg.PrefillBudget == 0 {
		cfg.PrefillBudget = DefaultPrefillBudget
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 60 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 60 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	so := generate.SamplerOptions{Temp: d.Temp, TopP: d.TopP, TopK: d.TopK, MinP: d.MinP}
	if _, err := generate.NewSampler(so); err != nil {
		return nil, fmt.Errorf("server: default sampler: %w", err)
	}
	opts := generate.BatchOptions{
		MaxTokens:           d.MaxTokens,
		StopTokens:          cfg.Text.EOS,
		Sampler:             so,
		Processors:          generate.ProcessorOptions{RepetitionPenalty: d.RepetitionPenalty, RepetitionContextSize: d.RepetitionContext},
		Seed:                cfg.Seed,
		CompletionBatchSize: cfg.MaxConcurrency,
		PrefillBatchSize:    min(cfg.PrefillConcurrency, cfg.MaxConcurrency),
		PrefillStepSize:     cfg.PrefillStep,
		PrefillBudget:       max(cfg.PrefillBudget, 0),
		// Log-probabilities come to the host only for requests that ask
		// for them (job.logprobs); greedy steps otherwise pick on the backend.
		NoLogprobs: true,
		// A request joining the decoding rows runs its last prompt token in
		// their next step rather than in a forward of its own (one pass over
		// the weights saved per join; on the cpu backend with per-row caches,
		// its default, every row's tokens are the same either way).
		JoinPrefilled: true,
		// Prompts of different lengths admitted together (a burst of
		// requests) prefill in groups of similar lengths rather than
		// right-padded to the longest, where each row's cache is its own
		// (the cpu backend's default): a chunk 8 or more tokens shorter
		// than the longest gets a forward of its own. 8 is about what one
		// more pass over the weights costs in prompt tokens on SmolLM2-135M
		// (Zen 4, 2026-12-05: a lone 20-token prompt prefilled in 12.5-14
		// ms, a 50-token one in 26-29 ms, so 3.5 ms a forward and 0.47 a
		// token).
		PrefillPadLimit: prefillPadLimit,
	}
	var dir *cacheDir
	if cfg.PromptCacheDir != "" {
		if cfg.PromptCacheBytes == 0 {
			return nil, errors.New("server: a prompt cache directory needs a prompt cache (PromptCacheBytes > 0)")
		}
		log := cfg.Log
		var mu sync.Mutex
		dir = &cacheDir{path: cfg.PromptCacheDir, model: cfg.ModelID, shape: cfg.PromptCacheShape, vocab: cfg.Model.VocabSize(),
			limit: cfg.PromptCacheBytes, b: cfg.Model.Backend(), log: func(format string, a ...any) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(log, format+"\n", a...)
			}}
	}
	eng, err := newEngine(cfg.Model, opts, cfg.PromptCacheBytes, dir)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return &Server{cfg: cfg, eng: eng, capacity: int64(cfg.MaxConcurrency + max(cfg.QueueSize, 0)), created: time.Now().Unix()}, nil
}

// Close stops the engine: requests in flight fail, every cache is freed.
func (s *Server) Close() { s.eng.close() }

// Memory reports the backend's live arrays and bytes and the prompt
// cache's share, read between generator steps.
func (s *Server) Memory() (MemoryStats, error) {
	m, _, err := s.Stats()
	return m, err
}

// Stats reports Memory's figures and the engine's work so far, read
// together between generator steps.
func (s *Server) Stats() (MemoryStats, EngineStats, error) {
	c := make(chan health, 1)
	select {
	case s.eng.stats <- c:
		h := <-c
		return h.mem, h.eng, nil
	case <-s.eng.quit:
		return MemoryStats{}, EngineStats{}, errClosed
	}
}

// HTTPServer returns an http.Server for addr serving Handler, with
// timeouts against slow clients (ConfigureHTTP).
func (s *Server) HTTPServer(addr string) *http.Server {
	hs := &http.Server{Addr: addr, Handler: s.Handler()}
	s.ConfigureHTTP(hs)
	return hs
}

// ConfigureHTTP sets hs's limits against slow or hostile clients: the
// headers within min(10 s, ReadTimeout), the whole request within
// ReadTimeout, at most 64 KiB of headers, 120 s idle. (Writes are bounded
// per write by WriteTimeout, so a long stream is not cut.)
func (s *Server) ConfigureHTTP(hs *http.Server) {
	hs.ReadHeaderTimeout = min(10*time.Second, s.cfg.ReadTimeout)
	hs.ReadTimeout = s.cfg.ReadTimeout
	hs.IdleTimeout = 120 * time.Second
	hs.MaxHeaderBytes = 64 << 10
}

// Handler returns the routes: POST /v1/chat/completions, POST
// /v1/completions, GET /v1/models, GET /health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.post(s.chat))
	mux.HandleFunc("/v1/completions", s.post(s.completions))
	mux.HandleFunc("/v1/models", s.get(s.models))
	mux.HandleFunc("/health", s.get(s.health))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, withCode(&apiError{Status: http.StatusNotFound, Type: "invalid_request_error",
			Message: fmt.Sprintf("no route %s %s (routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health)", r.Method, r.URL.Path)}, "not_found"))
	})
	return recoverer(mux)
}

// recoverer answers 500 instead of letting a handler's panic drop the
// connection (net/http would keep the process up, but say nothing).
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeError(w, &apiError{Status: 500, Type: "server_error", Message: fmt.Sprintf("internal error: %v", v)})
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, want string) {
	w.Header().Set("Allow", want)
	writeError(w, withCode(&apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
		Message: fmt.Sprintf("%s %s: want %s", r.Method, r.URL.Path, want)}, "method_not_allowed"))
}

func (s *Server) get(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, "GET")
			return
		}
		h(w, r)
	}
}

// post admits a request (429 when the server holds its capacity), then
// runs h.
func (s *Server) post(h func(w http.ResponseWriter, r *http.Request, rl *reqLog) *apiError) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rl := &reqLog{start: time.Now(), route: r.URL.Path}
		defer s.logRequest(rl)
		if r.Method != http.MethodPost {
			rl.status = http.StatusMethodNotAllowed
			methodNotAllowed(w, r, "POST")
			return
		}
		if n := s.inflight.Add(1); n > s.capacity {
			s.inflight.Add(-1)
			rl.status = http.StatusTooManyRequests
			w.Header().Set("Retry-After", "1")
			writeError(w, withCode(&apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error",
				Message: fmt.Sprintf("the server is at capacity (%d sequences decoding, %d waiting: --max-concurrency and --queue-size); retry later", s.cfg.MaxConcurrency, max(s.cfg.QueueSize, 0))}, "rate_limit_exceeded"))
			return
		}
		defer s.inflight.Add(-1)
		if e := h(w, r, rl); e != nil {
			rl.status = e.Status
			rl.err = e.Message
			writeError(w, e)
		}
	}
}

// reqLog is what the per-request log line says.
type reqLog struct {
	id, route              string
	start                  time.Time
	status                 int
	prompt, cached, tokens int
	finish, err            string
	firstToken             time.Duration
	stream                 bool
}

func (s *Server) logRequest(l *reqLog) {
	if l.status == 0 {
		l.status = http.StatusOK
	}
	line := fmt.Sprintf("request %s %s status=%d stream=%v prompt=%d cached=%d completion=%d finish=%s ttft=%s total=%s",
		orDash(l.id), l.route, l.status, l.stream, l.prompt, l.cached, l.tokens, orDash(l.finish), msec(l.firstToken), msec(time.Since(l.start)))
	if l.tokens > 1 && l.firstToken > 0 {
		line += " itl=" + msec((time.Since(l.start)-l.firstToken)/time.Duration(l.tokens-1))
	}
	if l.err != "" {
		line += fmt.Sprintf(" error=%q", l.err)
	}
	s.logMu.Lock()
	fmt.Fprintln(s.cfg.Log, line)
	s.logMu.Unlock()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func msec(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []any{
		map[string]any{"id": s.cfg.ModelID, "object": "model", "created": s.created, "owned_by": "mlxgo"},
	}})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	m, eng, err := s.Stats()
	if err != nil {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: err.Error()})
		return
	}
	writeJSON(w, map[string]any{"status": "ok", "memory": m, "engine": eng, "in_flight": s.inflight.Load()})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// newID returns prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// request is a checked request ready for the engine.
type request struct {
	chat   bool
	prompt []int32
	set    settings
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, rl *reqLog) *apiError {
	var req chatRequest
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	set, e := req.check(s.cfg.Defaults)
	if e != nil {
		return e
	}
	if e := s.checkModel(req.Model); e != nil {
		return e
	}
	if req.Logprobs != nil && *req.Logprobs {
		set.logprobs = true
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > maxTopLogprobs {
			return badRequest("top_logprobs", "top_logprobs is %d, want 0 to %d", *req.TopLogprobs, maxTopLogprobs)
		}
		if !set.logprobs {
			return badRequest("top_logprobs", "top_logprobs needs \"logprobs\": true")
		}
		set.topLogprobs = *req.TopLogprobs
	}
	switch {
	case len(req.Messages) == 0:
		return badRequest("messages", "messages is empty or missing, want at least one {\"role\", \"content\"}")
	case len(req.Messages) > maxMessages:
		return badRequest("messages", "%d messages, want at most %d", len(req.Messages), maxMessages)
	case !s.cfg.Text.Template:
		return badRequest("messages", "the model %s has no chat template (tokenizer_config.json's chat_template): use /v1/completions", s.cfg.ModelID)
	}
	msgs := make([]tokenizer.Message, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is %q, want system, user or assistant", i, m.Role)
		}
		msgs[i] = tokenizer.Message{Role: m.Role, Content: string(m.Content)}
	}
	ids, err := s.cfg.Text.Render(msgs)
	if err != nil {
		return badRequest("messages", "rendering the chat template: %v", err)
	}
	return s.generate(w, r, rl, request{chat: true, prompt: ids, set: set})
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request, rl *reqLog) *apiError {
	var req completionRequest
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); e != nil {
		return e
	}
	set, e := req.check(s.cfg.Defaults)
	if e != nil {
		return e
	}
	if e := s.checkModel(req.Model); e != nil {
		return e
	}
	switch {
	case req.Echo:
		return badRequest("echo", "echo is not supported")
	case req.Suffix != nil && *req.Suffix != "":
		return badRequest("suffix", "suffix is not supported")
	case req.BestOf != nil && *req.BestOf != 1:
		return badRequest("best_of", "best_of is %d; mlxgo serve generates one choice per request (best_of = 1)", *req.BestOf)
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > maxCompLogprobs {
			return badRequest("logprobs", "logprobs is %d, want 0 to %d", *req.Logprobs, maxCompLogprobs)
		}
		set.logprobs, set.topLogprobs = true, *req.Logprobs
	}
	ids, e := s.promptIDs(req.Prompt)
	if e != nil {
		return e
	}
	return s.generate(w, r, rl, request{prompt: ids, set: set})
}

// promptIDs reads a completions prompt: a string, an array of token ids,
// or an array holding one of those.
func (s *Server) promptIDs(raw json.RawMessage) ([]int32, *apiError) {
	if ids, e := s.onePrompt(raw); e == nil || ids != nil {
		return ids, e
	} else if e.Message != "" {
		return nil, e
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		if len(list) != 1 {
			return nil, badRequest("prompt", "prompt holds %d prompts; mlxgo serve answers one prompt per request", len(list))
		}
		if ids, e := s.onePrompt(list[0]); e == nil || e.Message != "" {
			return ids, e
		}
	}
	return nil, badRequest("prompt", "prompt is not a string, an array of token ids (int32) or an array holding one of those")
}

// onePrompt reads a string or an array of token ids; an error without a
// message means raw is neither.
func (s *Server) onePrompt(raw json.RawMessage) ([]int32, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "prompt is missing, want a string or an array of token ids")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, badRequest("prompt", "prompt is empty")
		}
		return s.cfg.Text.Tok.Encode(text), nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, badRequest("prompt", "prompt is an empty array of token ids")
		}
		return ids, nil
	}
	return nil, &apiError{}
}

func (s *Server) checkModel(name string) *apiError {
	if name == "" || name == s.cfg.ModelID {
		return nil
	}
	return withCode(&apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: fmt.Sprintf("model %q is not served here; this server serves %q (GET /v1/models)", name, s.cfg.ModelID)}, "model_not_found")
}

// sequence checks the prompt against the model and turns the settings
// into the generator's.
func (s *Server) sequence(req *request) (generate.SequenceOptions, *apiError) {
	vocab := s.cfg.Model.VocabSize()
	for i, id := range req.prompt {
		if id < 0 || int(id) >= vocab {
			return generate.SequenceOptions{}, badRequest("prompt", "prompt token %d is %d, want 0 <= id < %d (the model's vocabulary)", i, id, vocab)
		}
	}
	if len(req.prompt) == 0 {
		return generate.SequenceOptions{}, badRequest("prompt", "the prompt encodes to no tokens")
	}
	set := &req.set
	if ctx := s.cfg.ContextLength; ctx > 0 {
		if len(req.prompt) >= ctx {
			return generate.SequenceOptions{}, withCode(badRequest("messages", "the prompt is %d tokens; the model's context is %d tokens (max_position_embeddings)", len(req.prompt), ctx), "context_length_exceeded")
		}
		if len(req.prompt)+set.maxTokens > ctx {
			return generate.SequenceOptions{}, withCode(badRequest("max_tokens", "the prompt (%d tokens) and max_tokens (%d) exceed the model's context of %d tokens (max_position_embeddings)", len(req.prompt), set.maxTokens, ctx), "context_length_exceeded")
		}
	}
	so := generate.SamplerOptions{Temp: set.temp, TopP: set.topP, TopK: set.topK, MinP: set.minP}
	if _, err := generate.NewSampler(so); err != nil {
		return generate.SequenceOptions{}, badRequest("", "%v", err)
	}
	if so.Temp > 0 && so.TopK >= vocab {
		return generate.SequenceOptions{}, badRequest("top_k", "top_k is %d, want fewer than the vocabulary's %d tokens", so.TopK, vocab)
	}
	po := generate.ProcessorOptions{RepetitionPenalty: set.repPenalty, RepetitionContextSize: set.repContext}
	return generate.SequenceOptions{MaxTokens: set.maxTokens, Sampler: &so, Seed: set.seed, Processors: &po}, nil
}

// generate runs a checked request through the engine and answers it.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, rl *reqLog, req request) *apiError {
	if !req.set.maxGiven && s.cfg.ContextLength > 0 {
		// The default, not asked for: cut to the context left.
		req.set.maxTokens = max(1, min(req.set.maxTokens, s.cfg.ContextLength-len(req.prompt)))
	}
	seq, e := s.sequence(&req)
	if e != nil {
		return e
	}
	rl.prompt, rl.stream = len(req.prompt), req.set.stream
	if req.chat {
		rl.id = newID("chatcmpl-")
	} else {
		rl.id = newID("cmpl-")
	}
	seq.Logprobs = req.set.logprobs
	j := &job{prompt: req.prompt, seq: seq, logprobs: req.set.logprobs, topLogprobs: req.set.topLogprobs, out: newOutbox()}
	ctx := r.Context()
	select {
	case s.eng.submit <- j:
	case <-ctx.Done():
		rl.status, rl.err = 499, "client gone before its request was queued"
		return nil
	case <-s.eng.quit:
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: errClosed.Error()}
	}
	a := &answer{s: s, w: w, rc: http.NewResponseController(w), rl: rl, req: &req, tok: s.cfg.Text.Tok,
		dec: newDecoder(s.cfg.Text.Tok, req.set.stop)}
	err := a.run(ctx, j)
	if !j.out.isDone() || a.stopped {
		select {
		case s.eng.cancel <- j:
		case <-s.eng.quit:
		}
	}
	return err
}

func (o *outbox) isDone() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}

// answer writes one request's response as its tokens come.
type answer struct {
	s       *Server
	w       http.ResponseWriter
	rc      *http.ResponseController
	rl      *reqLog
	req     *request
	tok     *tokenizer.Tokenizer
	dec     *decoder
	text    strings.Builder
	lps     []tokenLogprob
	pending []tokenLogprob // logprobs not yet streamed
	n       int            // tokens generated
	cached  int
	finish  string
	stopped bool // a stop string ended the text: the sequence is cancelled
	headers bool // streaming has begun
	wErr    error
}

type tokenLogprob struct {
	token   string
	logprob float32
	top     []topLogprob
}

type topLogprob struct {
	token   string
	logprob float32
}

// run follows the job to its end. A write error or a gone client ends it
// early (the caller cancels the sequence).
func (a *answer) run(ctx context.Context, j *job) *apiError {
	defer func() { a.rl.tokens, a.rl.cached = a.n, a.cached }()
	for {
		select {
		case <-j.out.notify:
		case <-ctx.Done():
			a.rl.status, a.rl.err = 499, "client disconnected"
			return nil
		}
		evs, done, cached, err := j.out.take()
		a.cached = cached
		for _, ev := range evs {
			if a.finish != "" {
				break
			}
			a.token(ev)
		}
		if a.wErr != nil {
			a.rl.status, a.rl.err = 499, "writing to the client: "+a.wErr.Error()
			return nil
		}
		if err != nil && a.finish == "" {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = &apiError{Status: 500, Type: "server_error", Message: err.Error()}
			}
			if a.headers {
				a.rl.status, a.rl.err = ae.Status, ae.Message
				a.event(map[string]any{"error": ae})
				return nil
			}
			return ae
		}
		if a.finish != "" || done {
			if a.finish == "" {
				a.finish = generate.FinishLength
			}
			a.end()
			return nil
		}
	}
}

// token takes one generated token: its text through the stop strings, its
// logprobs, and streams what is final.
func (a *answer) token(ev tokenEvent) {
	a.n++
	if a.n == 1 {
		a.rl.firstToken = time.Since(a.rl.start)
	}
	var piece string
	stop := false
	if ev.finish != generate.FinishStop { // the stop token itself is not text
		piece, stop = a.dec.push(ev.id)
	}
	if a.req.set.logprobs {
		lp := tokenLogprob{token: a.tok.Decode([]int32{ev.id}), logprob: ev.logprob}
		for _, t := range ev.top {
			lp.top = append(lp.top, topLogprob{a.tok.Decode([]int32{t.id}), t.logprob})
		}
		a.lps = append(a.lps, lp)
		a.pending = append(a.pending, lp)
	}
	switch {
	case stop:
		a.finish, a.stopped = generate.FinishStop, true
	case ev.finish != "":
		a.finish = ev.finish
		piece += a.dec.flush()
	}
	a.text.WriteString(piece)
	if a.req.set.stream && (piece != "" || len(a.pending) > 0) {
		a.delta(piece, nil)
	}
}

// end writes the final chunk(s) or the whole response.
func (a *answer) end() {
	a.rl.finish = a.finish
	usage := map[string]any{"prompt_tokens": len(a.req.prompt), "completion_tokens": a.n, "total_tokens": len(a.req.prompt) + a.n,
		"prompt_tokens_details": map[string]any{"cached_tokens": a.cached}}
	if a.req.set.stream {
		a.delta("", &a.finish)
		if a.req.set.includeUsage {
			c := a.chunk()
			c["choices"] = []any{}
			c["usage"] = usage
			a.event(c)
		}
		a.write([]byte("data: [DONE]\n\n"))
		return
	}
	c := map[string]any{"id": a.rl.id, "created": time.Now().Unix(), "model": a.s.cfg.ModelID, "usage": usage}
	choice := map[string]any{"index": 0, "finish_reason": a.finish, "logprobs": a.logprobs(a.lps, 0)}
	if a.req.chat {
		c["object"] = "chat.completion"
		choice["message"] = map[string]any{"role": "assistant", "content": a.text.String()}
	} else {
		c["object"] = "text_completion"
		choice["text"] = a.text.String()
	}
	c["choices"] = []any{choice}
	b, _ := json.Marshal(c)
	a.w.Header().Set("Content-Type", "application/json")
	a.write(append(b, '\n'))
}

// chunk is a streamed chunk's envelope.
func (a *answer) chunk() map[string]any {
	c := map[string]any{"id": a.rl.id, "created": time.Now().Unix(), "model": a.s.cfg.ModelID}
	if a.req.chat {
		c["object"] = "chat.completion.chunk"
	} else {
		c["object"] = "text_completion"
	}
	if a.req.set.includeUsage {
		c["usage"] = nil
	}
	return c
}

// delta streams a piece of text (and the logprobs pending), or the final
// chunk when finish is set.
func (a *answer) delta(piece string, finish *string) {
	c := a.chunk()
	choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
	if len(a.pending) > 0 {
		choice["logprobs"] = a.logprobs(a.pending, len(a.text.String())-len(piece))
		a.pending = nil
	}
	if a.req.chat {
		d := map[string]any{}
		if !a.headers {
			d["role"] = "assistant"
		}
		if finish == nil || piece != "" {
			d["content"] = piece
		}
		choice["delta"] = d
	} else {
		choice["text"] = piece
	}
	c["choices"] = []any{choice}
	a.event(c)
}

// logprobs formats tokens' logprobs as OpenAI does for the route (nil
// without logprobs). offset is the text offset of the first (completions).
func (a *answer) logprobs(lps []tokenLogprob, offset int) any {
	if !a.req.set.logprobs {
		return nil
	}
	if a.req.chat {
		content := make([]any, len(lps))
		for i, lp := range lps {
			top := make([]any, len(lp.top))
			for k, t := range lp.top {
				top[k] = map[string]any{"token": t.token, "logprob": t.logprob, "bytes": byteList(t.token)}
			}
			content[i] = map[string]any{"token": lp.token, "logprob": lp.logprob, "bytes": byteList(lp.token), "top_logprobs": top}
		}
		return map[string]any{"content": content}
	}
	tokens := make([]string, len(lps))
	values := make([]float32, len(lps))
	tops := make([]map[string]float32, len(lps))
	offsets := make([]int, len(lps))
	for i, lp := range lps {
		tokens[i], values[i] = lp.token, lp.logprob
		tops[i] = map[string]float32{}
		for _, t := range lp.top {
			tops[i][t.token] = t.logprob
		}
		offsets[i] = offset
		offset += len(lp.token)
	}
	return map[string]any{"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
}

// byteList is s's UTF-8 bytes as a JSON array of numbers (OpenAI's bytes).
func byteList(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

// event writes one server-sent event.
func (a *answer) event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		a.wErr = err
		return
	}
	a.write(append(append([]byte("data: "), b...), '\n', '\n'))
}

// write sends b within the write timeout and flushes it.
func (a *answer) write(b []byte) {
	if a.wErr != nil {
		return
	}
	if !a.headers {
		a.headers = true
		if a.req.set.stream {
			h := a.w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
		}
	}
	_ = a.rc.SetWriteDeadline(time.Now().Add(a.s.cfg.WriteTimeout))
	if _, err := a.w.Write(b); err != nil {
		a.wErr = err
		return
	}
	if err := a.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		a.wErr = err
	}
}
