package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/tensor"
)

// kvCacheFlags are the KV cache flags of generate, chat and batch.
type kvCacheFlags struct {
	kvCache          string       // --kv-cache: "", full, quantized, rotating, turbo[:kKvV]
	turboRead        string       // --turbo-read: deferred or eager
	maxKVSize        int          // --max-kv-size
	kvBits           int          // --kv-bits
	kvGroupSize      int          // --kv-group-size
	quantizedKVStart int          // --quantized-kv-start
	batchCache       string       // --batch-cache (serve and batch): auto, shared or per-row
	kvDType          string       // --kv-dtype (generate, chat, batch, serve): auto, float32, bfloat16 or float16; "" when not a flag
	autoKVDType      tensor.DType // --kv-dtype auto's dtype for the backend and precision (setBackend)
}

func (f *kvCacheFlags) registerKV(fs *flag.FlagSet) {
	fs.StringVar(&f.kvCache, "kv-cache", "", "KV cache kind: full, quantized (--kv-bits, default 8), rotating (--max-kv-size), or turbo[:k<K>v<V>] (TurboQuant, keys K in 2,4,5,8 bits, values V in 2,3,4,5,8; turbo is k8v3); unset: chosen by --kv-bits and --max-kv-size")
	fs.StringVar(&f.turboRead, "turbo-read", "deferred", "how attention reads a turbo cache: deferred (on rotated values, the output un-rotated) or eager (values decoded first)")
	fs.IntVar(&f.maxKVSize, "max-kv-size", 0, "keep at most this many tokens in the KV cache: the first 4 and the latest (mlx_lm's rotating cache; > 4; 0: keep every token)")
	fs.IntVar(&f.kvBits, "kv-bits", 0, "quantize the KV cache to this many bits, 4 or 8 (mlx_lm's kv_bits; 0: no quantization)")
	fs.IntVar(&f.kvGroupSize, "kv-group-size", 64, "group size of the KV cache quantization, 32 or 64 (dividing head_dim)")
	fs.IntVar(&f.quantizedKVStart, "quantized-kv-start", 5000, "with --kv-bits, quantize the KV cache once it holds this many tokens")
}

// registerKVDType adds --kv-dtype (the commands that decode); setBackend
// must be called after parsing.
func (f *kvCacheFlags) registerKVDType(fs *flag.FlagSet) {
	fs.StringVar(&f.kvDType, "kv-dtype", "auto", "dtype of the full KV cache of a model that computes in float32 (such as a GGUF conversion with float32 norms): float32 (mlx_lm's), bfloat16 or float16 (half the cache's bytes and the attention's reads, like llama.cpp's cache types), or auto: bfloat16 with --backend cpu --precision fast, else float32; a bfloat16 or float16 model's cache keeps its own dtype")
}

// setBackend tells --kv-dtype auto the backend and precision
// (cpu.AutoKVDType on the cpu backend, else as computed).
func (f *kvCacheFlags) setBackend(backend, precision string) {
	f.autoKVDType = 0
	if backend == "cpu" {
		f.autoKVDType = cpu.AutoKVDType(precision)
	}
}

// kvStore resolves --kv-dtype for a cache of kind o: the dtype of
// nn.CacheOptions.KVDType (0: stored as computed), or a usage error.
func (f *kvCacheFlags) kvStore(o nn.CacheOptions) (tensor.DType, error) {
	full := !o.Encoded() && o.MaxKVSize == 0
	var dt tensor.DType
	switch f.kvDType {
	case "", "float32":
		return 0, nil
	case "auto":
		if full {
			return f.autoKVDType, nil
		}
		return 0, nil
	case "bfloat16":
		dt = tensor.BF16
	case "float16":
		dt = tensor.F16
	default:
		return 0, usagef("--kv-dtype %q: want auto, float32, bfloat16 or float16", f.kvDType)
	}
	if !full {
		return 0, usagef("--kv-dtype %s with %s: the dtype applies to the full KV cache only (quantized, TurboQuant and rotating caches store their own)", f.kvDType, kvDescription(o))
	}
	return dt, nil
}

// registerBatchCache adds --batch-cache (the commands that decode batches).
func (f *kvCacheFlags) registerBatchCache(fs *flag.FlagSet) {
	fs.StringVar(&f.batchCache, "batch-cache", "auto", "how a batch keeps its full KV caches: shared (mlx_lm's BatchKVCache: one left-padded buffer, copied when sequences finish or join), per-row (one cache per sequence, moved instead: each computes what it computes alone), or auto (per-row on the cpu backend, shared on mlx); quantized and turbo caches are always per row")
}

// batchOptions are the cache options of a batch on backend: cacheKind's,
// with --batch-cache applied to the full cache.
func (f *kvCacheFlags) batchOptions(backend string) (nn.CacheOptions, error) {
	o, err := f.cacheKind()
	if err != nil {
		return o, err
	}
	full := !o.Encoded()
	switch f.batchCache {
	case "auto":
		o.PerRow = full && o.MaxKVSize == 0 && backend == "cpu"
	case "shared":
		if !full {
			return o, usagef("--batch-cache shared with %s: quantized and TurboQuant batches keep one cache per row (mlx_lm has no shared quantized batch cache)", kvDescription(o))
		}
	case "per-row":
		if o.MaxKVSize > 0 {
			return o, usagef("--batch-cache per-row with --max-kv-size %d: a rotating batch shares one window (mlx_lm's BatchRotatingKVCache)", o.MaxKVSize)
		}
		o.PerRow = full
	default:
		return o, usagef("--batch-cache %q: want auto, shared or per-row", f.batchCache)
	}
	return o, nil
}

// cacheKind resolves --kv-cache against the other flags: the options, or a
// usage error naming the flags that disagree.
func (f *kvCacheFlags) cacheKind() (nn.CacheOptions, error) {
	o := nn.CacheOptions{MaxKVSize: f.maxKVSize, KVBits: f.kvBits, KVGroupSize: f.kvGroupSize, QuantizedKVStart: f.quantizedKVStart}
	if f.turboRead != "deferred" && f.turboRead != "eager" {
		return o, usagef("--turbo-read %q: want deferred or eager", f.turboRead)
	}
	switch k := f.kvCache; {
	case k == "":
	case k == "full":
		if f.kvBits != 0 || f.maxKVSize != 0 {
			return o, usagef("--kv-cache full keeps every token unquantized: drop --kv-bits and --max-kv-size")
		}
	case k == "quantized":
		if f.maxKVSize != 0 {
			return o, usagef("--kv-cache quantized with --max-kv-size: a rotating cache cannot be quantized")
		}
		if o.KVBits == 0 {
			o.KVBits = 8
		}
	case k == "rotating":
		if f.maxKVSize == 0 || f.kvBits != 0 {
			return o, usagef("--kv-cache rotating needs --max-kv-size N (> %d) and no --kv-bits", nn.RotatingKeep)
		}
	case k == "turbo" || strings.HasPrefix(k, "turbo:"):
		s, err := turboquant.ParseScheme(k)
		if err != nil {
			return o, usagef("--kv-cache: %v", err)
		}
		if f.kvBits != 0 || f.maxKVSize != 0 {
			return o, usagef("--kv-cache %s sets its own bits: drop --kv-bits and --max-kv-size", k)
		}
		o.Turbo, o.TurboEager = s, f.turboRead == "eager"
	default:
		return o, usagef("--kv-cache %q: want full, quantized, rotating, turbo or turbo:k<K>v<V> (such as turbo:k8v3)", k)
	}
	dt, err := f.kvStore(o)
	if err != nil {
		return o, err
	}
	o.KVDType = dt
	if err := o.Check(); err != nil {
		return o, usagef("--kv-cache, --max-kv-size, --kv-bits, --kv-group-size, --quantized-kv-start: %v", err)
	}
	return o, nil
}

// cacheOptions are the resolved options (cacheKind's, its error dropped:
// parsing reports it first).
func (f *kvCacheFlags) cacheOptions() nn.CacheOptions {
	o, _ := f.cacheKind()
	return o
}

// kvFlagsSet reports whether any flag selects a cache other than the full one.
func (f *kvCacheFlags) kvFlagsSet() bool {
	return f.kvCache != "" && f.kvCache != "full" || f.kvBits != 0 || f.maxKVSize != 0
}

// kvDescription names the cache for messages.
func kvDescription(o nn.CacheOptions) string {
	switch {
	case o.Turbo != (turboquant.Scheme{}):
		return fmt.Sprintf("--kv-cache %s", o.Turbo)
	case o.KVBits != 0:
		return fmt.Sprintf("--kv-bits %d", o.KVBits)
	case o.MaxKVSize != 0:
		return fmt.Sprintf("--max-kv-size %d", o.MaxKVSize)
	case o.KVDType != 0:
		return fmt.Sprintf("--kv-cache full --kv-dtype %s", o.KVDType.MLXName())
	}
	return "--kv-cache full"
}

// kvErr is cacheKind's error.
func kvErr(f *kvCacheFlags) error {
	_, err := f.cacheKind()
	return err
}

// fileKind describes the kind of cache a prompt cache file holds (its first
// layer's).
func fileKind(pc *promptcache.File) string {
	if len(pc.Layers) == 0 {
		return "no caches"
	}
	l := pc.Layers[0]
	switch l.Class {
	case promptcache.QuantizedKVCacheClass:
		return fmt.Sprintf("%d-bit quantized caches in groups of %d (QuantizedKVCache)", l.Bits, l.GroupSize)
	case promptcache.RotatingKVCacheClass:
		return fmt.Sprintf("rotating caches of %d slots keeping %d (RotatingKVCache)", l.MaxSize, l.Keep)
	case promptcache.TurboQuantKVCacheClass:
		read := "eager"
		if l.TurboDeferred {
			read = "deferred"
		}
		return fmt.Sprintf("TurboQuant %s caches read %s (TurboQuantKVCache)", l.Turbo, read)
	}
	return "full caches (KVCache)"
}

// checkFileKind returns a usage error when the KV cache flags (set: the
// flags given) ask for another kind of cache than the prompt cache file
// holds: the file's caches are used as they are stored, and flags naming
// that kind are accepted (a quantized file its own bits and group size, as
// mlx_lm checks). Unlike mlx_lm, --kv-bits with a file of full caches is
// refused rather than quantizing them later; so is a --kv-dtype other than
// auto.
func (f *kvCacheFlags) checkFileKind(pc *promptcache.File, file string, set map[string]bool) error {
	if set["kv-dtype"] && f.kvDType != "auto" {
		return usagef("--kv-dtype %s with --prompt-cache-file %s: the file's caches are used as stored (drop --kv-dtype)", f.kvDType, file)
	}
	if f.kvCache == "" && !set["kv-bits"] && !set["max-kv-size"] || len(pc.Layers) == 0 {
		return nil
	}
	o, err := f.cacheKind()
	if err != nil {
		return err
	}
	l := pc.Layers[0]
	ok := false
	switch {
	case o.Turbo != (turboquant.Scheme{}):
		ok = l.Class == promptcache.TurboQuantKVCacheClass && l.Turbo == o.Turbo && (!set["turbo-read"] || l.TurboDeferred == !o.TurboEager)
	case o.KVBits > 0:
		ok = l.Class == promptcache.QuantizedKVCacheClass && l.Bits == o.KVBits && (!set["kv-group-size"] || l.GroupSize == o.KVGroupSize)
	case o.MaxKVSize > 0:
		ok = l.Class == promptcache.RotatingKVCacheClass && l.MaxSize == o.MaxKVSize
	default:
		ok = l.Class == promptcache.KVCacheClass || l.Class == ""
	}
	if !ok {
		return usagef("--prompt-cache-file %s holds %s; %s asks for another kind (a prompt cache file's caches are used as stored: drop the KV cache flags)", file, fileKind(pc), kvDescription(o))
	}
	return nil
}
