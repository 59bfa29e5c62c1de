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
"""

import argparse
import json
import sys
import time

import mlx.core as mx

import mlx_lm
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache


def log(msg):
    print(f"mlx_lm_driver: {msg}", file=sys.stderr, flush=True)


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model directory (as mlx_lm.load takes it)")
    ap.add_argument("--ids-file", required=True, help="JSON list of prompt token ids")
    ap.add_argument("--prompt-lens", required=True, help="comma-separated prompt lengths (prefixes of the ids)")
    ap.add_argument("--decode-tokens", type=int, required=True, help="tokens generated after the first prompt length (>= 3)")
    ap.add_argument("--reps", type=int, required=True, help="timed repetitions per prompt length")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs before the timed ones")
    ap.add_argument("--device", choices=["default", "cpu", "gpu"], default="default")
    args = ap.parse_args()

    if args.device != "default":
        mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    with open(args.ids_file) as f:
        ids = json.load(f)
    lens = [int(x) for x in args.prompt_lens.split(",") if x]
    if args.decode_tokens < 3 or args.reps < 1 or not lens:
        sys.exit("mlx_lm_driver: want --decode-tokens >= 3, --reps >= 1 and at least one prompt length")
    if any(n < 1 or n > len(ids) for n in lens):
        sys.exit(f"mlx_lm_driver: prompt lengths {lens} must be in 1..{len(ids)} (ids in {args.ids_file})")

    t0 = time.perf_counter()
    model, _ = mlx_lm.load(args.model)  # evaluates every parameter (not lazy)
    load_s = time.perf_counter() - t0
    device = str(mx.default_device())
    log(f"loaded in {load_s:.2f}s on {device}")

    runs = []
    for n in lens:
        prompt = mx.array(ids[:n], dtype=mx.int32)
        for r in range(args.warmup + args.reps):
            sec = prefill(model, prompt)
            runs.append({"kind": "prefill", "prompt": n, "warmup": r < args.warmup, "seconds": sec})
            log(f"prefill {n} {rep_name(r, args)}: {sec:.3f}s ({n / sec:.1f} tok/s)")
    n = lens[0]
    prompt = mx.array(ids[:n], dtype=mx.int32)
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
            f"{len(token_s)} tokens in {token_s[-1]:.2f}s")
        del cache
    json.dump({"engine": "mlx_lm", "device": device, "load_s": load_s, "runs": runs}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
