package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mlxgo/mlxgo/bench"
)

// benchContextUsage is appended to benchUsage.
const benchContextUsage = `
Context sweep (--contexts): decode and prefill tok/s against the tokens
already in the KV cache, per cache kind, on one checkpoint (--model, default
the synthetic MiniCPM5-1B), with llama.cpp (llama-bench -d DEPTHS -fa 1,
cache type f16 for full, q8_0 or q4_0 for quantized) and mlx_lm (kv_bits)
beside it. At each context the cache is filled, then --context-prefill
tokens are appended (timed: prefill tok/s at that depth) and --decode-tokens
generated (timed: decode tok/s), the cache trimmed back after each run. The
table gives each cell's ratio to the row's first context and the memory per
cached token. E.g.
  mlxgo bench --contexts 1k,4k,8k,16k,32k --kv-cache full,quantized \
      --configs cpu-fast,llama.cpp --llama-bench "$bin/llama-bench" --reps 3 --decode-tokens 32
`

// contextOptions are the flags of the context sweep.
type contextOptions struct {
	contexts, caches              string
	kvBits, kvGroupSize, maxKV, p int
	child                         bool
}

// contextFlags registers the context sweep's flags on fs.
func contextFlags(fs *flag.FlagSet) *contextOptions {
	o := &contextOptions{}
	fs.StringVar(&o.contexts, "contexts", "", "run the context sweep at these comma-separated contexts (tokens already cached; k = ×1024), e.g. 1k,4k,8k,16k,32k")
	fs.StringVar(&o.caches, "kv-cache", "full,quantized", "context sweep: comma-separated KV cache kinds: "+strings.Join(bench.ContextCaches, ", "))
	fs.IntVar(&o.kvBits, "kv-bits", 8, "context sweep: bits of the quantized cache (4 or 8)")
	fs.IntVar(&o.kvGroupSize, "kv-group-size", 64, "context sweep: group size of the quantized cache (32 or 64)")
	fs.IntVar(&o.maxKV, "max-kv-size", 4096, "context sweep: window of the rotating cache")
	fs.IntVar(&o.p, "context-prefill", 512, "context sweep: tokens of each timed prefill at a context")
	fs.BoolVar(&o.child, "context-child", false, "internal: run one configuration's context sweep on one --kv-cache kind and print its JSON report")
	return o
}

// runContextChild is the child of one configuration and cache kind.
func runContextChild(cx *contextOptions, config, model, idsFile string, decode, reps, warmup int, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "mlxgo bench --context-child: %v\n", err)
		return 1
	}
	name, opts, err := bench.ParseConfig(config)
	if err != nil {
		return fail(err)
	}
	contexts, err := bench.ParseContexts(cx.contexts)
	if err != nil {
		return fail(err)
	}
	co, err := bench.ContextCacheOptions(cx.caches, cx.kvBits, cx.kvGroupSize, cx.maxKV)
	if err != nil {
		return fail(err)
	}
	ids, err := bench.ReadIDs(idsFile)
	if err != nil {
		return fail(err)
	}
	tag := cx.caches
	switch cx.caches {
	case "quantized":
		tag = fmt.Sprintf("quantized %d-bit g%d", cx.kvBits, cx.kvGroupSize)
	case "rotating":
		tag = fmt.Sprintf("rotating %d", cx.maxKV)
	}
	err = bench.RunContextChild(bench.ContextChildOptions{Model: model, Backend: name, Options: opts, IDs: ids, Contexts: contexts,
		Cache: co, CacheTag: tag, Prefill: cx.p, Decode: decode, Reps: reps, Warmup: warmup}, stdout, stderr)
	if err != nil {
		return fail(err)
	}
	return 0
}

// parse checks the sweep's flags and returns its contexts and cache
// kinds, or an error naming the flag.
func (cx *contextOptions) parse() (contexts []int, caches []string, err error) {
	if contexts, err = bench.ParseContexts(cx.contexts); err != nil {
		return nil, nil, fmt.Errorf("--contexts: %v", err)
	}
	for _, k := range strings.Split(cx.caches, ",") {
		if k = strings.TrimSpace(k); k != "" {
			if _, err := bench.ContextCacheOptions(k, cx.kvBits, cx.kvGroupSize, cx.maxKV); err != nil {
				return nil, nil, fmt.Errorf("--kv-cache %s: %v", k, err)
			}
			caches = append(caches, k)
		}
	}
	if len(caches) == 0 {
		return nil, nil, fmt.Errorf("--kv-cache: no cache kind (want some of %s)", strings.Join(bench.ContextCaches, ", "))
	}
	if cx.p < 1 {
		return nil, nil, fmt.Errorf("--context-prefill %d: want >= 1", cx.p)
	}
	return contexts, caches, nil
}

// runContextSweep runs the sweep, prints its table and writes its JSON
// under results (unless empty).
func runContextSweep(cx *contextOptions, o bench.ContextOptions, results string, stdout, stderr io.Writer) int {
	var err error
	if o.Contexts, o.Caches, err = cx.parse(); err != nil {
		fmt.Fprintf(stderr, "mlxgo bench: %v\nRun 'mlxgo bench --help' for usage.\n", err)
		return 2
	}
	o.KVBits, o.KVGroupSize, o.MaxKVSize, o.Prefill = cx.kvBits, cx.kvGroupSize, cx.maxKV, cx.p
	res, err := bench.RunContext(o)
	return finishSweep(res, err, "context", results, stdout, stderr)
}
