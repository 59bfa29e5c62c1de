package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
)

// The context sweep (mlxgo bench --contexts): decode and prefill speed
// against the number of tokens already in the cache, per KV cache kind,
// the way llama-bench's -d (depth) measures them:
//
//   - at each context d the cache is filled to d tokens (untimed, in
//     prefill chunks);
//   - prefill tok/s: P more tokens appended at depth d (as generation
//     prefills a prompt: all but the last in chunks, then the last), P / time;
//   - decode tok/s: greedy generation of N tokens from depth d, with the
//     harness's decode statistic (summarise);
//   - after each timed run the cache is trimmed back to d where it can be
//     (a rotating cache past its window cannot: its later depths are then
//     the depths it reached, and the table says which);
//   - memory per cached token: the bytes of the cache's arrays per slot,
//     summed over layers (capacity slots included in CacheBytes).
//
// One child process per configuration and cache kind (its peak RSS is its
// own); llama.cpp is llama-bench with -d, flash attention and the cache
// type mapped from the kind (full: f16, quantized: q8_0 or q4_0); mlx_lm
// is bench/mlx_lm_driver.py --contexts (mlx_lm's caches and kv_bits).

// Cache kinds of the context sweep.
var ContextCaches = []string{"full", "quantized", "rotating", "turbo"}

// ContextOptions configure a context sweep.
type ContextOptions struct {
	Model      string   // MLX checkpoint directory
	GGUF       string   // its GGUF twin for llama-bench ("" skips llama.cpp)
	Self       []string // command line of a Go child, e.g. {exe, "bench", "--child"}
	Python     string   // the virtualenv's python for mlx_lm ("" skips it)
	Driver     string   // bench/mlx_lm_driver.py
	LlamaBench string   // llama-bench binary ("" skips llama.cpp)
	// Configs selects configurations as Options.Configs does.
	Configs  []string
	Contexts []int    // depths, ascending
	Caches   []string // kinds from ContextCaches
	// KV quantization of the "quantized" kind (mlx_lm's kv_bits and
	// kv_group_size; it quantizes from the first chunk on) and the window
	// of the "rotating" kind (max_kv_size).
	KVBits, KVGroupSize, MaxKVSize int
	Prefill                        int // P: tokens of each timed prefill
	DecodeTokens, Reps, Warmup     int
	Threads                        int // llama-bench threads; 0: runtime.NumCPU()
	Seed                           uint64
	Progress                       io.Writer
}

// ContextPoint is one configuration's measurements at one context.
type ContextPoint struct {
	Context int `json:"context"`
	// PrefillDepth and DecodeDepth are the tokens in the cache when the
	// timed runs started (Context, unless a rotating cache could not be
	// trimmed back).
	PrefillDepth int   `json:"prefill_depth"`
	DecodeDepth  int   `json:"decode_depth"`
	PrefillTPS   Stat  `json:"prefill_tps"`
	DecodeTPS    Stat  `json:"decode_tps"`
	CacheBytes   int64 `json:"cache_bytes,omitempty"`
}

// ContextRow is one configuration and cache kind over every context.
type ContextRow struct {
	Config string `json:"config"`
	Engine string `json:"engine"`
	Device string `json:"device"`
	Cache  string `json:"cache"` // the kind as the engine names it, e.g. "quantized 8-bit g64", "q8_0"
	Kind   string `json:"kind"`  // full, quantized or rotating
	// BytesPerToken is the memory one cached token takes (all layers).
	BytesPerToken float64        `json:"bytes_per_token,omitempty"`
	PeakRSSBytes  int64          `json:"peak_rss_bytes,omitempty"`
	LoadS         float64        `json:"load_s,omitempty"`
	Points        []ContextPoint `json:"points"`
	Note          string         `json:"note,omitempty"`
	Err           string         `json:"error,omitempty"`
}

// ContextResult is a whole context sweep.
type ContextResult struct {
	Date         string       `json:"date"`
	Host         string       `json:"host"`
	CPU          string       `json:"cpu"`
	Cores        int          `json:"cores"`
	GoVersion    string       `json:"go_version"`
	LoadAvgStart string       `json:"loadavg_start"`
	LoadAvgEnd   string       `json:"loadavg_end"`
	Model        string       `json:"model"`
	Contexts     []int        `json:"contexts"`
	Prefill      int          `json:"prefill"`
	DecodeTokens int          `json:"decode_tokens"`
	Reps         int          `json:"reps"`
	Warmup       int          `json:"warmup"`
	Rows         []ContextRow `json:"rows"`
	Notes        []string     `json:"notes,omitempty"`
}

// ContextChildReport is what a context child prints (the Go child and
// mlx_lm_driver.py --contexts): one JSON object. Each point's Runs are
// RunRecords: "prefill" runs of Prompt = P tokens, "generate" runs with
// their token times.
type ContextChildReport struct {
	Engine        string              `json:"engine"`
	Device        string              `json:"device"`
	Cache         string              `json:"cache"`
	LoadS         float64             `json:"load_s"`
	BytesPerToken float64             `json:"bytes_per_token"`
	Points        []ContextChildPoint `json:"points"`
}

// ContextChildPoint is one context of a ContextChildReport.
type ContextChildPoint struct {
	Context      int         `json:"context"`
	PrefillDepth int         `json:"prefill_depth"`
	DecodeDepth  int         `json:"decode_depth"`
	CacheBytes   int64       `json:"cache_bytes"`
	Runs         []RunRecord `json:"runs"`
}

// ParseContexts parses a comma-separated list of contexts: integers with
// an optional k suffix (×1024), ascending, each at least 1.
func ParseContexts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mul := 1
		if t, ok := strings.CutSuffix(strings.ToLower(f), "k"); ok {
			f, mul = t, 1024
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1<<20 {
			return nil, fmt.Errorf("context %q: want a positive integer, optionally with a k suffix (×1024), up to 1024k", f)
		}
		n *= mul
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("contexts %q: want them ascending, each once", s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("contexts %q: want at least one", s)
	}
	return out, nil
}

// ContextCacheOptions returns the cache options of a kind: the full cache,
// a quantized one (bits, groupSize, quantized from the start), a rotating
// one of maxKVSize slots, or TurboQuant ("turbo", k8v3, or
// "turbo:k<K>v<V>"; read deferred).
func ContextCacheOptions(kind string, bits, groupSize, maxKVSize int) (nn.CacheOptions, error) {
	var o nn.CacheOptions
	switch {
	case kind == "full":
	case kind == "quantized":
		o = nn.CacheOptions{KVBits: bits, KVGroupSize: groupSize}
	case kind == "rotating":
		o = nn.CacheOptions{MaxKVSize: maxKVSize}
	case kind == "turbo" || strings.HasPrefix(kind, "turbo:"):
		s, err := turboquant.ParseScheme(kind)
		if err != nil {
			return o, err
		}
		o = nn.CacheOptions{Turbo: s}
	default:
		return o, fmt.Errorf("KV cache kind %q: want one of %s", kind, strings.Join(ContextCaches, ", "))
	}
	return o, o.Check()
}

// contextCacheName is the kind as the Go child and mlx_lm name it.
func contextCacheName(kind string, bits, groupSize, maxKVSize int) string {
	switch kind {
	case "quantized":
		return fmt.Sprintf("quantized %d-bit g%d", bits, groupSize)
	case "rotating":
		return fmt.Sprintf("rotating %d", maxKVSize)
	}
	if o, err := ContextCacheOptions(kind, bits, groupSize, maxKVSize); err == nil && o.Turbo != (turboquant.Scheme{}) {
		return o.Turbo.String() + " deferred"
	}
	return "full"
}

// ContextChildOptions is one Go configuration's context sweep on one kind.
type ContextChildOptions struct {
	Model    string
	Backend  string
	Options  backend.Options
	IDs      []int32
	Contexts []int
	Cache    nn.CacheOptions
	CacheTag string // its name in the report
	Prefill  int
	Decode   int
	Reps     int
	Warmup   int
}

// contextIDs is how many prompt ids a sweep consumes at most: the largest
// context, then per context and run P prefill tokens and one prompt token
// for the decode run.
func contextIDs(contexts []int, p, reps, warmup int) int {
	return slices.Max(contexts) + len(contexts)*(reps+warmup)*(p+1) + 1
}

// RunContextChild loads the model, runs the sweep on one cache kind and
// writes a ContextChildReport as one JSON line to stdout.
func RunContextChild(o ContextChildOptions, stdout, stderr io.Writer) error {
	if o.Prefill < 1 || o.Decode < 3 || o.Reps < 1 || o.Warmup < 0 || len(o.Contexts) == 0 {
		return fmt.Errorf("bench context child: prefill %d, decode %d, reps %d, warm-up %d, %d contexts: want >= 1, >= 3, >= 1, >= 0, >= 1",
			o.Prefill, o.Decode, o.Reps, o.Warmup, len(o.Contexts))
	}
	if need := contextIDs(o.Contexts, o.Prefill, o.Reps, o.Warmup); len(o.IDs) < need {
		return fmt.Errorf("bench context child: %d prompt ids, want at least %d", len(o.IDs), need)
	}
	b, err := backend.Open(o.Backend, o.Options)
	if err != nil {
		return err
	}
	defer b.Close()
	start := time.Now()
	m, err := load(b, o.Model, "", stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	co := o.Cache
	if !co.Encoded() && co.MaxKVSize == 0 && co.KVDType == 0 {
		co.KVDType = autoKVDType(o.Backend, o.Options.Precision) // the full cache as the commands make it
	}
	view, err := m.WithCache(co)
	if err != nil {
		return err
	}
	rep := ContextChildReport{Engine: "mlxgo", Device: o.Backend, Cache: o.CacheTag, LoadS: time.Since(start).Seconds()}
	if o.Options.Precision != "" {
		rep.Device += " " + o.Options.Precision
	}
	s, err := generate.NewSession[nn.KVCache](view)
	if err != nil {
		return err
	}
	defer s.Release()
	next := 0 // the next prompt id to feed
	feed := func(n int) []int32 {
		ids := o.IDs[next : next+n]
		next += n
		return ids
	}
	// back trims the session to depth where every cache can be trimmed.
	back := func(depth int) error {
		for _, c := range s.Caches() {
			if t, ok := c.(interface{ Trimmable() bool }); ok && !t.Trimmable() {
				return nil
			}
		}
		return s.Trim(depth)
	}
	for _, ctx := range o.Contexts {
		if n := ctx - s.Len(); n > 0 {
			t0 := time.Now()
			if err := s.Append(feed(n), 0); err != nil {
				return fmt.Errorf("bench context child: filling to %d: %w", ctx, err)
			}
			fmt.Fprintf(stderr, "bench context child %s %s: filled to %d in %.1fs\n", rep.Device, rep.Cache, s.Len(), time.Since(t0).Seconds())
		}
		pt := ContextChildPoint{Context: ctx, PrefillDepth: s.Len()}
		for r := range o.Warmup + o.Reps {
			depth := s.Len()
			t0 := time.Now()
			if err := s.Append(feed(o.Prefill), 0); err != nil {
				return fmt.Errorf("bench context child: prefill at %d: %w", depth, err)
			}
			sec := time.Since(t0).Seconds()
			pt.Runs = append(pt.Runs, RunRecord{Kind: "prefill", Prompt: o.Prefill, Warmup: r < o.Warmup, Seconds: sec})
			fmt.Fprintf(stderr, "bench context child %s %s: prefill %d at %d %s: %.3fs (%.1f tok/s)\n",
				rep.Device, rep.Cache, o.Prefill, depth, repName(r, o.Warmup, o.Reps), sec, float64(o.Prefill)/sec)
			if err := back(depth); err != nil {
				return err
			}
		}
		pt.DecodeDepth = s.Len()
		for r := range o.Warmup + o.Reps {
			depth := s.Len()
			var times []float64
			t0 := time.Now()
			_, err := s.Generate(feed(1), generate.Options{MaxTokens: o.Decode}, func(generate.Token) bool {
				times = append(times, time.Since(t0).Seconds())
				return true
			})
			if err != nil {
				return fmt.Errorf("bench context child: decode at %d: %w", depth, err)
			}
			pt.Runs = append(pt.Runs, RunRecord{Kind: "generate", Prompt: depth, Warmup: r < o.Warmup, TTFT: times[0], Tokens: times})
			fmt.Fprintf(stderr, "bench context child %s %s: decode %d at %d %s: %.2fs\n",
				rep.Device, rep.Cache, len(times), depth, repName(r, o.Warmup, o.Reps), times[len(times)-1])
			if err := back(depth); err != nil {
				return err
			}
		}
		per, total := cacheBytes(s.Caches())
		pt.CacheBytes, rep.BytesPerToken = total, per
		rep.Points = append(rep.Points, pt)
	}
	return json.NewEncoder(stdout).Encode(rep)
}

// cacheBytes returns the bytes of the caches' arrays per slot (axis 2 of
// each [B, H, slots, ·] array), summed over layers, and their total.
func cacheBytes(caches []nn.KVCache) (perToken float64, total int64) {
	for _, c := range caches {
		for _, a := range c.State() {
			sh := a.Shape()
			n := int64(sh.Size()) * int64(a.DType().Size())
			total += n
			if len(sh) == 4 && sh[2] > 0 {
				perToken += float64(n) / float64(sh[2])
			}
		}
	}
	return perToken, total
}

// summariseContext turns a child's report into a row.
func summariseContext(rep ContextChildReport) ContextRow {
	row := ContextRow{Engine: rep.Engine, Device: rep.Device, Cache: rep.Cache, LoadS: rep.LoadS, BytesPerToken: rep.BytesPerToken}
	for _, p := range rep.Points {
		prompts, _, _, dec := summarise(p.Runs)
		cp := ContextPoint{Context: p.Context, PrefillDepth: p.PrefillDepth, DecodeDepth: p.DecodeDepth, DecodeTPS: dec, CacheBytes: p.CacheBytes}
		if len(prompts) > 0 {
			cp.PrefillTPS = prompts[0].PrefillTPS
		}
		row.Points = append(row.Points, cp)
	}
	return row
}

// RunContext measures every selected configuration on every cache kind
// and context. A configuration that fails is reported with its error.
func RunContext(o ContextOptions) (*ContextResult, error) {
	configs, err := selectConfigs(o.Configs)
	if err != nil {
		return nil, err
	}
	if o.Reps < 1 || o.Warmup < 0 || o.DecodeTokens < 3 || o.Prefill < 1 || len(o.Contexts) == 0 || len(o.Caches) == 0 {
		return nil, fmt.Errorf("bench: context sweep: reps %d, warm-up %d, decode tokens %d, prefill %d, %d contexts, %d cache kinds: want >= 1, >= 0, >= 3, >= 1, >= 1, >= 1",
			o.Reps, o.Warmup, o.DecodeTokens, o.Prefill, len(o.Contexts), len(o.Caches))
	}
	for _, k := range o.Caches {
		co, err := ContextCacheOptions(k, o.KVBits, o.KVGroupSize, o.MaxKVSize)
		if err != nil {
			return nil, fmt.Errorf("bench: --kv-cache %s: %w", k, err)
		}
		if co.Turbo != (turboquant.Scheme{}) {
			// Named here rather than as a failed row of every configuration.
			if cfg, err := checkpoint.LoadConfig(o.Model); err == nil {
				if err := turboquant.CheckHeadDim(cfg.HeadDim); err != nil {
					return nil, fmt.Errorf("bench: --kv-cache %s: %w (the head_dim of %s/config.json)", k, err, o.Model)
				}
			}
		}
	}
	host, _ := os.Hostname()
	res := &ContextResult{Date: time.Now().Format(time.RFC3339), Host: host, CPU: cpuModel(), Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), LoadAvgStart: loadAvg(), Model: o.Model, Contexts: o.Contexts,
		Prefill: o.Prefill, DecodeTokens: o.DecodeTokens, Reps: o.Reps, Warmup: o.Warmup}
	tmp, err := os.MkdirTemp("", "mlxgo-bench-context-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	ids, err := PromptIDs(o.Model, contextIDs(o.Contexts, o.Prefill, o.Reps, o.Warmup), o.Seed)
	if err != nil {
		return nil, err
	}
	idsFile := filepath.Join(tmp, "ids.json")
	data, err := json.Marshal(ids)
	if err == nil {
		err = os.WriteFile(idsFile, data, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: writing %s: %v", idsFile, err)
	}
	plan := []string{"--ids-file", idsFile, "--contexts", joinInts(o.Contexts), "--context-prefill", strconv.Itoa(o.Prefill),
		"--decode-tokens", strconv.Itoa(o.DecodeTokens), "--reps", strconv.Itoa(o.Reps), "--warmup", strconv.Itoa(o.Warmup),
		"--kv-bits", strconv.Itoa(o.KVBits), "--kv-group-size", strconv.Itoa(o.KVGroupSize), "--max-kv-size", strconv.Itoa(o.MaxKVSize)}
	for _, name := range configs {
		switch name {
		case "llama.cpp":
			if o.LlamaBench == "" || o.GGUF == "" {
				o.logf("llama.cpp skipped: %s", map[bool]string{true: "no --llama-bench given", false: "the checkpoint has no GGUF twin"}[o.LlamaBench == ""])
				continue
			}
			for _, kind := range o.Caches {
				if llamaCacheType(kind, o.KVBits) == "" {
					res.Notes = append(res.Notes, fmt.Sprintf("llama.cpp has no %s cache: no llama.cpp row for it", kind))
					continue
				}
				res.Rows = append(res.Rows, o.runLlamaDepth(kind))
			}
			continue
		case "mlx_lm":
			if o.Python == "" {
				o.logf("mlx_lm skipped: no python virtualenv")
				continue
			}
			var kinds []string
			for _, kind := range o.Caches {
				if isTurbo(kind) {
					res.Notes = append(res.Notes, fmt.Sprintf("mlx_lm has no TurboQuant cache: no mlx_lm row for %s", kind))
				} else {
					kinds = append(kinds, kind)
				}
			}
			for _, kind := range kinds {
				argv := append([]string{o.Python, o.Driver, "--model", o.Model, "--kv-cache", kind}, plan...)
				o.logf("=== %s, %s cache: contexts %v, prefill %d, %d decode tokens, %d warm-up + %d reps", name, kind, o.Contexts, o.Prefill, o.DecodeTokens, o.Warmup, o.Reps)
				res.Rows = append(res.Rows, o.contextRow(name, kind, argv))
			}
			continue
		default:
			if _, _, err := ParseConfig(name); err != nil {
				return nil, err
			}
		}
		for _, kind := range o.Caches {
			argv := append(append(slices.Clone(o.Self), "--context-child", "--config", name, "--model", o.Model, "--kv-cache", kind), plan...)
			o.logf("=== %s, %s cache: contexts %v, prefill %d, %d decode tokens, %d warm-up + %d reps", name, kind, o.Contexts, o.Prefill, o.DecodeTokens, o.Warmup, o.Reps)
			res.Rows = append(res.Rows, o.contextRow(name, kind, argv))
		}
	}
	res.LoadAvgEnd = loadAvg()
	return res, nil
}

// isTurbo reports whether a kind is TurboQuant.
func isTurbo(kind string) bool { return kind == "turbo" || strings.HasPrefix(kind, "turbo:") }

// contextRow runs one child (argv) of configuration name on one kind.
func (o *ContextOptions) contextRow(name, kind string, argv []string) ContextRow {
	row := o.runContextChild(argv)
	row.Config, row.Kind = name, kind
	if row.Err != "" {
		o.logf("%s, %s cache failed: %s", name, kind, row.Err)
	}
	return row
}

func (o *ContextOptions) logf(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: "+format+"\n", a...)
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// runContextChild runs one child and summarises its report.
func (o *ContextOptions) runContextChild(argv []string) ContextRow {
	var stdout bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = &stdout
	cmd.Stderr = o.Progress
	if cmd.Stderr == nil {
		cmd.Stderr = io.Discard
	}
	err := cmd.Run()
	rss := maxRSS(cmd.ProcessState)
	if err != nil {
		return ContextRow{Err: fmt.Sprintf("%s: %v", strings.Join(argv, " "), err), PeakRSSBytes: rss}
	}
	var rep ContextChildReport
	if err := json.Unmarshal(lastLine(stdout.Bytes()), &rep); err != nil {
		return ContextRow{Err: fmt.Sprintf("its output is not a context report: %v", err), PeakRSSBytes: rss}
	}
	row := summariseContext(rep)
	row.PeakRSSBytes = rss
	return row
}

// llamaCacheType maps a kind to llama.cpp's cache type ("" when it has
// none).
func llamaCacheType(kind string, bits int) string {
	switch kind {
	case "full":
		return "f16"
	case "quantized":
		if bits == 4 {
			return "q4_0"
		}
		return "q8_0"
	}
	return ""
}

// llamaKVBytes is llama.cpp's cache bytes per token per K or V element of
// a cache type: f16 2, q8_0 34/32, q4_0 18/32.
func llamaKVBytes(t string) float64 {
	switch t {
	case "q8_0":
		return 34.0 / 32
	case "q4_0":
		return 18.0 / 32
	}
	return 2
}

// runLlamaDepth runs llama-bench at every depth with the kind's cache type
// and flash attention.
func (o *ContextOptions) runLlamaDepth(kind string) ContextRow {
	row := ContextRow{Config: "llama.cpp", Engine: "llama.cpp", Device: "cpu", Kind: kind}
	ct := llamaCacheType(kind, o.KVBits)
	if ct == "" {
		row.Err = fmt.Sprintf("llama.cpp has no %s cache", kind)
		return row
	}
	row.Cache = ct
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	argv := []string{o.LlamaBench, "-m", o.GGUF, "-p", strconv.Itoa(o.Prefill), "-n", strconv.Itoa(o.DecodeTokens),
		"-d", joinInts(o.Contexts), "-ctk", ct, "-ctv", ct, "-fa", "1",
		"-t", strconv.Itoa(threads), "-r", strconv.Itoa(o.Reps), "-o", "json"}
	o.logf("running %s", strings.Join(argv, " "))
	var stdout bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = &stdout
	cmd.Stderr = o.Progress
	err := cmd.Run()
	row.PeakRSSBytes = maxRSS(cmd.ProcessState)
	if err != nil {
		row.Err = fmt.Sprintf("%s: %v", strings.Join(argv, " "), err)
		return row
	}
	pts, err := parseLlamaDepth(stdout.Bytes(), o.Contexts)
	if err != nil {
		row.Err = err.Error()
		return row
	}
	row.Points = pts
	row.Device = "cpu " + strconv.Itoa(threads) + " threads"
	if g, err := ggufKVShape(o.GGUF); err == nil {
		row.BytesPerToken = float64(g) * llamaKVBytes(ct)
	}
	row.Note = "llama-bench -d: ppP and tgN at each depth, flash attention on"
	return row
}

// llamaDepthEntry is the part of a llama-bench JSON result with a depth.
type llamaDepthEntry struct {
	NPrompt   int       `json:"n_prompt"`
	NGen      int       `json:"n_gen"`
	NDepth    int       `json:"n_depth"`
	AvgTS     float64   `json:"avg_ts"`
	SamplesTS []float64 `json:"samples_ts"`
}

// parseLlamaDepth reads llama-bench -o json output into one point per
// depth: ppP as prefill tok/s and tgN as decode tok/s.
func parseLlamaDepth(out []byte, contexts []int) ([]ContextPoint, error) {
	var entries []llamaDepthEntry
	if err := json.Unmarshal(out, &entries); err != nil {
		return nil, fmt.Errorf("llama-bench output is not its JSON: %v", err)
	}
	pts := make([]ContextPoint, len(contexts))
	for i, c := range contexts {
		pts[i] = ContextPoint{Context: c, PrefillDepth: c, DecodeDepth: c}
	}
	for _, e := range entries {
		i := slices.Index(contexts, e.NDepth)
		if i < 0 {
			continue
		}
		s := e.SamplesTS
		if len(s) == 0 {
			s = []float64{e.AvgTS}
		}
		switch {
		case e.NPrompt > 0 && e.NGen == 0:
			pts[i].PrefillTPS = NewStat(s)
		case e.NGen > 0 && e.NPrompt == 0:
			pts[i].DecodeTPS = NewStat(s)
		}
	}
	return pts, nil
}

// ggufKVShape returns the K and V values one token adds to the cache of the
// GGUF model at path: the output sizes of every block's attn_k and attn_v.
func ggufKVShape(path string) (int64, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for _, t := range f.Tensors {
		if strings.HasPrefix(t.Name, "blk.") && (strings.HasSuffix(t.Name, ".attn_k.weight") || strings.HasSuffix(t.Name, ".attn_v.weight")) && len(t.Dims) == 2 {
			n += int64(t.Dims[1])
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("bench: %s has no attn_k/attn_v weights", path)
	}
	return n, nil
}

// Failed reports whether a configuration failed.
func (r *ContextResult) Failed() bool {
	for _, c := range r.Rows {
		if c.Err != "" {
			return true
		}
	}
	return false
}
