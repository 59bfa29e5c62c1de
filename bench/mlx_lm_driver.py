"""mlx_lm side of `mlxgo bench`: load a model with mlx_lm.load and time generate_step on given ids.

Run with the project virtualenv (.venv/bin/python bench/mlx_lm_driver.py ...). It prints one JSON
object on stdout, in the same form as `mlxgo bench --child` so the harness computes every statistic
the same way for every engine:

  {"engine": "mlx_lm", "device": "...", "load_s": float,
   "runs": [{"kind": "prefill", "prompt": P, "warmup": bool, "seconds": float},
            {"kind": "generate", "prompt": P, "warmup": bool, "ttft_s": float, "token_s": [t_1, ..., t_N]}]}

A prefill run times each prompt length through a fresh cache as generate_step prefills it, until the
last position's logits are computed. A generate run (after the first prompt length) times
generate_step: ttft_s from the call to the first token, token_s the times (from the same start) at
which each generated token was known. Greedy decoding, no stop tokens. Progress goes to stderr.

With --graph-steps N it instead measures the host's part of one decode step, the twin of
backend/metal's BenchmarkModelDecodeBuild: a 15-token prompt goes into the cache, then N times the
graph of one greedy generate_step token is built (model, logsumexp, argmax; timed, no evaluation),
evaluated with the cache and trimmed back. It prints {"engine": "mlx_lm", "device": ...,
"graph_primitives": {name: count}, "build_us_median": float, "build_us_min": float}, the
primitives counted from mx.export_to_dot as mlxgo's GraphOps counts them.

With --contexts C1,C2,... it runs `mlxgo bench --contexts`'s sweep on one --kv-cache kind (full;
quantized: mlx_lm's maybe_quantize_kv_cache with --kv-bits and --kv-group-size from the first
chunk on; rotating: RotatingKVCache(--max-kv-size, keep=4) per layer, built directly because
make_prompt_cache ignores max_kv_size for models with make_cache): at each context the cache is
filled, --context-prefill ids are appended as the prefill above runs a prompt (timed), then
--decode-tokens are generated with generate_step (timed), the cache trimmed back after each run
where it is trimmable. It prints the Go child's context report:
  {"engine": "mlx_lm", "device": ..., "cache": ..., "load_s": ..., "bytes_per_token": ...,
   "points": [{"context": C, "prefill_depth": D, "decode_depth": D, "cache_bytes": B,
               "runs": [... as above ...]}]}
"""

import argparse
import collections
import gc
import io
import json
import re
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

import mlx_lm
from mlx_lm.generate import generate_step, maybe_quantize_kv_cache
from mlx_lm.utils import load_model
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache


def log(msg):
    print(f"mlx_lm_driver: {msg}", file=sys.stderr, flush=True)


def memory_note():
    """The process's resident set now and at its peak (Linux /proc/self/status) and MLX's allocator
    counters, for the progress log (the Go child logs the same)."""
    parts = []
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    parts.append(f"{key} {' '.join(val.split())}")
    except OSError:
        pass
    parts.append(f"mlx memory active {mx.get_active_memory()} peak {mx.get_peak_memory()} "
                 f"cache {mx.get_cache_memory()}")
    return ", ".join(parts)


def reset_peak_rss():
    """Start a new peak of the resident set (Linux: 5 in /proc/self/clear_refs resets VmHWM), as
    the Go child does before its generation runs; whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss():
    """The peak resident set since the start or the last reset_peak_rss, in bytes (VmHWM), or 0."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key == "VmHWM":
                    return int(val.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def rep_name(r, args):
    return "warm-up" if r < args.warmup else f"rep {r - args.warmup + 1}/{args.reps}"


def prefill(model, prompt):
    """Seconds to run prompt through a fresh cache as generate_step prefills it: every token but the
    last without evaluating the head (the logits stay lazy and are never computed), the caches'
    state evaluated, then the last token until its logits are computed."""
    cache = make_prompt_cache(model)
    start = time.perf_counter()
    if prompt.size > 1:
        model(prompt[None, :-1], cache=cache)
        mx.eval([c.state for c in cache])
    logits = model(prompt[None, -1:], cache=cache)
    mx.eval(logits)
    return time.perf_counter() - start


def graph_build(model, steps):
    """Primitives of one decode step's graph and the time to build it (see --graph-steps)."""
    cache = make_prompt_cache(model)
    model(mx.array([list(range(1, 16))], dtype=mx.int32), cache=cache)
    mx.eval([c.state for c in cache])
    y = mx.array([16], dtype=mx.int32)

    def step():  # generate_step's _step with the driver's greedy sampler
        logits = model(y[None], cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return mx.argmax(logprobs, axis=-1), logprobs.squeeze(0)

    prims, times = collections.Counter(), []
    for i in range(steps):
        start = time.perf_counter()
        out = step()
        times.append(time.perf_counter() - start)
        state = [a for c in cache for a in (c.keys, c.values)]
        if i == 0:
            dot = io.StringIO()
            mx.export_to_dot(dot, *out, *state)
            for line in dot.getvalue().splitlines():
                m = re.search(r'label\s*=\s*"([^"]*)"[^;]*shape\s*=\s*rectangle', line)
                if m:
                    prims[m.group(1)] += 1
        mx.eval(*out, *state)
        for c in cache:
            c.offset -= 1
    times.sort()
    return {"engine": "mlx_lm", "device": str(mx.default_device()), "graph_primitives": dict(prims),
            "build_us_median": times[len(times) // 2] * 1e6, "build_us_min": times[0] * 1e6}


def batch_sweep(model_dir, ids, lens, sizes, args):
    """The batch sweep of `mlxgo bench --batch-sizes`: for each batch size B, B prompts (row i is
    ids[i:i+P]) through mlx_lm's BatchGenerator with greedy sampling and no stop tokens, each to
    --decode-tokens tokens; a "batch" run records the generator's own counters over the run
    (generation_tokens in decode_time, prompt_tokens in prompt_time), as the Go child does with
    generate.BatchGenerator's."""
    from mlx_lm.generate import BatchGenerator

    if len(lens) != 1 or not sizes or min(sizes) < 1:
        sys.exit("mlx_lm_driver: a batch sweep takes one prompt length and batch sizes >= 1")
    n = lens[0]
    if max(sizes) - 1 + n > len(ids):
        sys.exit(f"mlx_lm_driver: batch {max(sizes)} of {n}-token prompts needs {max(sizes) - 1 + n} ids")
    t0 = time.perf_counter()
    model, _ = mlx_lm.load(model_dir)
    load_s = time.perf_counter() - t0
    device = str(mx.default_device())
    log(f"loaded in {load_s:.2f}s on {device} ({memory_note()})")
    runs = []
    for b in sizes:
        prompts = [ids[i:i + n] for i in range(b)]
        for r in range(args.warmup + args.reps):
            gen = BatchGenerator(model, stop_tokens=[], completion_batch_size=b, prefill_batch_size=b,
                                 sampler=lambda lp: mx.argmax(lp, axis=-1))
            with gen.stats() as st:
                gen.insert(prompts, [args.decode_tokens] * b)
                while gen.next_generated():
                    pass
            gen.close()
            runs.append({"kind": "batch", "prompt": n, "batch": b, "warmup": r < args.warmup,
                         "seconds": st.decode_time, "generated": st.generation_tokens,
                         "prompt_seconds": st.prompt_time, "prompt_tokens": st.prompt_tokens})
            rate = st.generation_tokens / st.decode_time if st.decode_time > 0 else 0.0
            log(f"batch {b} {rep_name(r, args)}: {st.generation_tokens} tokens in {st.decode_time:.2f}s "
                f"of decode steps ({rate:.1f} tok/s), prompts {st.prompt_time:.2f}s")
            del gen
    return {"engine": "mlx_lm", "device": device, "load_s": load_s, "runs": runs}


def context_sweep(model, ids, args, load_s):
    """The --contexts sweep on one cache kind (see the module doc)."""
    contexts = [int(x) for x in args.contexts.split(",") if x]
    kind, p, n = args.kv_cache, args.context_prefill, args.decode_tokens
    if kind == "rotating":
        cache = [RotatingKVCache(max_size=args.max_kv_size, keep=4) for _ in model.layers]
        tag = f"rotating {args.max_kv_size}"
    else:
        cache = make_prompt_cache(model)
        tag = "full"
    quant = {}
    if kind == "quantized":
        quant = dict(kv_bits=args.kv_bits, kv_group_size=args.kv_group_size, quantized_kv_start=0)
        tag = f"quantized {args.kv_bits}-bit g{args.kv_group_size}"
    pos = 0
    held = 0

    def feed(k):
        nonlocal pos
        out = mx.array(ids[pos:pos + k], dtype=mx.int32)
        pos += k
        return out

    def append(tokens):
        """generate_step's prefill of tokens into the cache: chunks of 2048 without the head, the
        caches quantized once due, then the last token until its logits are computed."""
        nonlocal held
        rest = tokens[:-1]
        while rest.size > 0:
            model(rest[None, :2048], cache=cache)
            if quant:
                maybe_quantize_kv_cache(cache, **quant)
            mx.eval([c.state for c in cache])
            rest = rest[2048:]
        mx.eval(model(tokens[None, -1:], cache=cache))
        if quant:
            maybe_quantize_kv_cache(cache, **quant)
        held += tokens.size

    def back(depth):
        nonlocal held
        if all(c.is_trimmable() for c in cache):
            for c in cache:
                c.trim(held - depth)
            held = depth

    def cache_bytes():
        per, total = 0.0, 0
        for c in cache:
            for _, a in tree_flatten(c.state):
                if not isinstance(a, mx.array):
                    continue
                total += a.nbytes
                if a.ndim == 4 and a.shape[2] > 0:
                    per += a.nbytes / a.shape[2]
        return per, total

    points = []
    per = 0.0
    for ctx in contexts:
        if ctx > held:
            append(feed(ctx - held))
            log(f"{tag}: filled to {held} ({memory_note()})")
        pt = {"context": ctx, "prefill_depth": held, "runs": []}
        for r in range(args.warmup + args.reps):
            depth = held
            start = time.perf_counter()
            append(feed(p))
            sec = time.perf_counter() - start
            pt["runs"].append({"kind": "prefill", "prompt": p, "warmup": r < args.warmup, "seconds": sec})
            log(f"{tag}: prefill {p} at {depth} {rep_name(r, args)}: {sec:.3f}s ({p / sec:.1f} tok/s)")
            back(depth)
        pt["decode_depth"] = held
        for r in range(args.warmup + args.reps):
            depth = held
            token_s = []
            start = time.perf_counter()
            for _ in generate_step(feed(1), model, max_tokens=n, prompt_cache=cache,
                                   sampler=lambda lp: mx.argmax(lp, axis=-1), **quant):
                token_s.append(time.perf_counter() - start)
            pt["runs"].append({"kind": "generate", "prompt": depth, "warmup": r < args.warmup,
                               "ttft_s": token_s[0], "token_s": token_s})
            log(f"{tag}: decode {len(token_s)} at {depth} {rep_name(r, args)}: {token_s[-1]:.2f}s")
            held = cache[0].offset  # generate_step runs ahead of the tokens it yields
            back(depth)
        per, pt["cache_bytes"] = cache_bytes()
        points.append(pt)
    return {"engine": "mlx_lm", "device": str(mx.default_device()), "cache": tag, "load_s": load_s,
            "bytes_per_token": per, "points": points}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model directory (as mlx_lm.load takes it)")
    ap.add_argument("--ids-file", help="JSON list of prompt token ids (required without --graph-steps)")
    ap.add_argument("--prompt-lens", help="comma-separated prompt lengths (prefixes of the ids)")
    ap.add_argument("--decode-tokens", type=int, help="tokens generated after the first prompt length (>= 3)")
    ap.add_argument("--reps", type=int, help="timed repetitions per prompt length")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs before the timed ones")
    ap.add_argument("--device", choices=["default", "cpu", "gpu"], default="default")
    ap.add_argument("--batch-sizes",
                    help="instead: a batch sweep, comma-separated batch sizes (one prompt length)")
    ap.add_argument("--contexts", help="instead: the context sweep at these comma-separated depths")
    ap.add_argument("--kv-cache", choices=["full", "quantized", "rotating"], default="full")
    ap.add_argument("--kv-bits", type=int, default=8)
    ap.add_argument("--kv-group-size", type=int, default=64)
    ap.add_argument("--max-kv-size", type=int, default=4096)
    ap.add_argument("--context-prefill", type=int, default=512)
    ap.add_argument("--graph-steps", type=int, default=0,
                    help="instead: count one decode step's graph primitives and time building it N times")
    args = ap.parse_args()

    if args.device != "default":
        mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    if args.graph_steps > 0:
        model, _ = mlx_lm.load(args.model)
        json.dump(graph_build(model, args.graph_steps), sys.stdout)
        print()
        return
    if args.contexts:
        if None in (args.ids_file, args.decode_tokens, args.reps) or args.decode_tokens < 3 or args.reps < 1:
            sys.exit("mlx_lm_driver: --contexts wants --ids-file, --decode-tokens >= 3 and --reps >= 1")
        with open(args.ids_file) as f:
            ids = json.load(f)
        t0 = time.perf_counter()
        model, _ = load_model(Path(args.model))  # no tokenizer needed: ids are given
        json.dump(context_sweep(model, ids, args, time.perf_counter() - t0), sys.stdout)
        print()
        return
    if None in (args.ids_file, args.prompt_lens, args.decode_tokens, args.reps):
        sys.exit("mlx_lm_driver: want --ids-file, --prompt-lens, --decode-tokens and --reps (or --graph-steps)")
    with open(args.ids_file) as f:
        ids = json.load(f)
    lens = [int(x) for x in args.prompt_lens.split(",") if x]
    if args.decode_tokens < 3 or args.reps < 1 or not lens:
        sys.exit("mlx_lm_driver: want --decode-tokens >= 3, --reps >= 1 and at least one prompt length")
    if any(n < 1 or n > len(ids) for n in lens):
        sys.exit(f"mlx_lm_driver: prompt lengths {lens} must be in 1..{len(ids)} (ids in {args.ids_file})")

    if args.batch_sizes:
        json.dump(batch_sweep(args.model, ids, lens, [int(x) for x in args.batch_sizes.split(",") if x], args),
                  sys.stdout)
        print()
        return

    t0 = time.perf_counter()
    model, _ = mlx_lm.load(args.model)  # evaluates every parameter (not lazy)
    load_s = time.perf_counter() - t0
    device = str(mx.default_device())
    log(f"loaded in {load_s:.2f}s on {device} ({memory_note()})")

    runs = []
    for n in lens:
        prompt = mx.array(ids[:n], dtype=mx.int32)
        for r in range(args.warmup + args.reps):
            sec = prefill(model, prompt)
            runs.append({"kind": "prefill", "prompt": n, "warmup": r < args.warmup, "seconds": sec})
            log(f"prefill {n} {rep_name(r, args)}: {sec:.3f}s ({n / sec:.1f} tok/s)")
        log(f"after prefill {n}: {memory_note()}")
    n = lens[0]
    prompt = mx.array(ids[:n], dtype=mx.int32)
    # The decode peak starts from what the process needs after the prefill runs (as the Go child).
    mx.clear_cache()
    gc.collect()
    prefill_peak = peak_rss()  # the reset below also lowers the peak the kernel reports at exit
    decode_peak = reset_peak_rss()
    for r in range(args.warmup + args.reps):
        cache = make_prompt_cache(model)
        token_s = []
        start = time.perf_counter()
        for _ in generate_step(prompt, model, max_tokens=args.decode_tokens, prompt_cache=cache,
                               sampler=lambda lp: mx.argmax(lp, axis=-1)):
            token_s.append(time.perf_counter() - start)
        runs.append({"kind": "generate", "prompt": n, "warmup": r < args.warmup,
                     "ttft_s": token_s[0], "token_s": token_s})
        log(f"generate after {n} {rep_name(r, args)}: first token {token_s[0]:.3f}s, "
            f"{len(token_s)} tokens in {token_s[-1]:.2f}s ({memory_note()})")
        del cache
    report = {"engine": "mlx_lm", "device": device, "load_s": load_s, "runs": runs}
    if decode_peak:
        report["decode_peak_rss_bytes"] = peak_rss()
        report["prefill_peak_rss_bytes"] = prefill_peak
    json.dump(report, sys.stdout)
    print()


if __name__ == "__main__":
    main()
