"""KV cache fixtures: mlx_lm's generate_step with other caches than the full KVCache.

Called by generate.py as `kvcache.generate(models_dir)` after models.generate wrote the tiny
checkpoints there; the cases go to each checkpoint's cases/ directory, named
model/<checkpoint>/rotating/...

Rotating (max_kv_size): make_prompt_cache(model, max_kv_size=W) makes RotatingKVCache(max_size=W,
keep=4) per layer for a model without a make_cache method. mlx_lm 0.32.2's llama.Model has one
(it returns full KVCaches unless layers use a sliding window), so for the llama checkpoints here
generate_step's max_kv_size is ignored; the cases pass generate_step the caches make_prompt_cache
makes otherwise (prompt_cache=[RotatingKVCache(W, keep=4), ...]). The prompts are longer than
the window, so prefill chunks take the concatenating path with array masks (create_causal_mask
with window_size) and decode rotates in place past the window, several times.

  rotating/decode  prompt 30, prefill step 16 (chunks 16 and 13: both need the window mask),
                   20 single-token steps with teacher forcing (raw logits and logprobs), the
                   same op as models.py's decode case plus the param max_kv_size;
  rotating/greedy  prompt 21, prefill step 5 (chunks 5 5 5 5: causal until the window is
                   reached, then masked), 32 greedy tokens of generate_step.
"""

import os

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import RotatingKVCache

import models

MAX_KV_SIZE = 12
KEEP = 4  # make_prompt_cache's keep


def _rotating_cache(model):
    """make_prompt_cache(model, max_kv_size=MAX_KV_SIZE) for a model without make_cache."""
    return [RotatingKVCache(max_size=MAX_KV_SIZE, keep=KEEP) for _ in model.layers]
CHECKPOINTS = ["q4g64-f32", "q4g64-bf16", "fp-f32", "q8g32-bf16"]


def _prefill(model, cache, prompt, step):
    """generate_step's prefill: every prompt token but the last, in chunks of `step`,
    the caches' state evaluated after each chunk. Returns the last token."""
    prompt = mx.array(prompt)
    while prompt.size > 1:
        n = min(step, prompt.size - 1)
        model(prompt[:n][None], cache=cache)
        mx.eval([c.state for c in cache])
        prompt = prompt[n:]
    return prompt


def _replay(model, ids, steps, step, fed=None):
    """generate_step with max_kv_size and the argmax sampler, written out: (fed [steps], generated
    [steps], logits [steps, V], logprobs [steps, V]). With `fed` given, those tokens are fed
    (teacher forcing) instead of the argmax of the previous step."""
    cache = _rotating_cache(model)
    y = _prefill(model, cache, ids, step)
    fed_out, gen, all_logits, all_logprobs = [], [], [], []
    for i in range(steps):
        if fed is not None:
            y = mx.array([int(fed[i])])
        fed_out.append(y.item())
        logits = model(y[None], cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        y = mx.argmax(logprobs, axis=-1)
        mx.eval(y, logits, logprobs)
        gen.append(y.item())
        all_logits.append(logits[0])
        all_logprobs.append(logprobs[0])
    return (np.array(fed_out, dtype=np.int32), np.array(gen, dtype=np.int32),
            mx.stack(all_logits), mx.stack(all_logprobs))


def _check_generate_step(model, ids, steps, step, run, what):
    """mlx_lm's own generate_step on rotating caches must give the replay's tokens and bits."""
    tokens, lps = [], []
    for tok, lp in generate_step(mx.array(ids), model, max_tokens=steps,
                                 prefill_step_size=step, prompt_cache=_rotating_cache(model)):
        tokens.append(tok)
        lps.append(lp)
    if not np.array_equal(np.array(tokens, dtype=np.int32), run[1]):
        raise AssertionError(f"{what}: generate_step tokens differ from the replay")
    models._assert_same_bits(mx.stack(lps), run[3], f"{what}: generate_step logprobs vs the replay")


def _pick_prompt(model, dtype, first_seed, n, steps, step):
    """First prompt seed >= first_seed whose rotating greedy run has no near-tie (models.py's
    margin rule)."""
    for seed in range(first_seed, first_seed + 100):
        ids = models._ids(seed, n)
        run = _replay(model, ids, steps, step)
        margins, thresholds = models._margins(run[2], run[3], dtype)
        if np.all(margins > thresholds):
            return seed, ids, run, margins
    raise RuntimeError(f"no prompt seed in [{first_seed}, {first_seed + 100}) without a near-tie")


def _decode_case(model, ref_model, ckpt, dtype, cases_dir):
    prompt_len, steps, step = 30, 20, 16
    seed, ids, run, _ = _pick_prompt(model, dtype, 6000, prompt_len, steps, step)
    _check_generate_step(model, ids, steps, step, run, f"{ckpt} rotating/decode")
    fed, _, logits, logprobs = run
    params = {
        "prefill_step_size": step,
        "prompt_seed": seed,
        "prompt_length": prompt_len,
        "steps": steps,
        "sampler": "argmax",
        "max_kv_size": MAX_KV_SIZE,
        "margin_rule": models._margin_rule(dtype),
    }
    refs = None
    if ref_model is not None:
        _, _, rl, rlp = _replay(ref_model, ids, steps, step, fed=fed)
        refs = {"logits": models._f32(rl), "logprobs": models._f32(rlp)}
    return models._write(cases_dir, ckpt, dtype, "rotating/decode", "decode", "model_logits", params,
                         {"ids": ids},
                         {"tokens": fed, "logits": logits, "logprobs": logprobs},
                         {"tokens": "model_tokens", "logits": "model_logits", "logprobs": "model_logits"},
                         refs)


def _greedy_case(model, ref_model, ckpt, dtype, cases_dir):
    prompt_len, max_tokens, step = 21, 32, 5
    seed, ids, run, margins = _pick_prompt(model, dtype, 7000, prompt_len, max_tokens, step)
    _check_generate_step(model, ids, max_tokens, step, run, f"{ckpt} rotating/greedy")
    params = {
        "prefill_step_size": step,
        "prompt_seed": seed,
        "prompt_length": prompt_len,
        "max_tokens": max_tokens,
        "sampler": "argmax",
        "max_kv_size": MAX_KV_SIZE,
        "margin_rule": models._margin_rule(dtype),
    }
    if ref_model is not None:
        # MLX's own error on these steps (see models._greedy_case).
        _, _, _, rlp = _replay(ref_model, ids, max_tokens, step,
                               fed=np.concatenate([ids[-1:], run[1][:-1]]))
        err = np.abs(models._f64(run[3]) - models._f64(rlp)).max()
        params["oracle_logprob_error"] = float(np.float32(err))
    return models._write(cases_dir, ckpt, dtype, "rotating/greedy", "greedy", "model_tokens", params,
                         {"ids": ids}, {"tokens": run[1], "margins": margins},
                         {"tokens": "model_tokens", "margins": "oracle_info"})


def generate(models_dir):
    """Write the KV cache cases of CHECKPOINTS (already written by models.generate under
    models_dir); return the manifest entries."""
    mx.set_default_device(mx.cpu)
    entries = []
    for ckpt in CHECKPOINTS:
        dtype = mx.bfloat16 if ckpt.endswith("-bf16") else mx.float32
        path = os.path.join(models_dir, ckpt)
        model = models._load_with_mlx_lm(path)
        ref_model = models._upcast(models._load_with_mlx_lm(path)) if dtype == mx.bfloat16 else None
        cases_dir = os.path.join(path, "cases")
        entries.append(_decode_case(model, ref_model, ckpt, dtype, cases_dir))
        entries.append(_greedy_case(model, ref_model, ckpt, dtype, cases_dir))
    return entries
