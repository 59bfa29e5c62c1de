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

Quantized (kv_bits): generate_step(..., kv_bits, kv_group_size, quantized_kv_start) on the model's
own caches (full KVCache); maybe_quantize_kv_cache turns each into a QuantizedKVCache after the
model call that leaves it holding quantized_kv_start tokens, and attention then runs
quantized_scaled_dot_product_attention. Group size 32 (head_dim is 32).

  quantized/decode  kv_bits 8, start 10: converted after the first prefill chunk (16 tokens), so
                    the second chunk (13 tokens, causal mask) and the 20 teacher-forced steps
                    read quantized keys; prompt 30, prefill step 16;
  quantized/greedy  kv_bits 4, start 40: converted during decode (after the step that stores the
                    40th token); prompt 21, prefill step 5, 32 greedy tokens.
"""

import os

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step, maybe_quantize_kv_cache
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache

import models

MAX_KV_SIZE = 12
KEEP = 4  # make_prompt_cache's keep
QUANT_DECODE = (8, 32, 10)  # kv_bits, kv_group_size, quantized_kv_start
QUANT_GREEDY = (4, 32, 40)


def _rotating_cache(model):
    """make_prompt_cache(model, max_kv_size=MAX_KV_SIZE) for a model without make_cache."""
    return [RotatingKVCache(max_size=MAX_KV_SIZE, keep=KEEP) for _ in model.layers]
CHECKPOINTS = ["q4g64-f32", "q4g64-bf16", "fp-f32", "q8g32-bf16"]


def _prefill(model, cache, prompt, step, quant):
    """generate_step's prefill: every prompt token but the last, in chunks of `step`, the caches
    quantized when due (quant: None or (bits, group_size, start)) and their state evaluated after
    each chunk. Returns the last token."""
    prompt = mx.array(prompt)
    while prompt.size > 1:
        n = min(step, prompt.size - 1)
        model(prompt[:n][None], cache=cache)
        _maybe_quantize(cache, quant)
        mx.eval([c.state for c in cache])
        prompt = prompt[n:]
    return prompt


def _maybe_quantize(cache, quant):
    if quant is not None:
        bits, group_size, start = quant
        maybe_quantize_kv_cache(cache, quantized_kv_start=start, kv_group_size=group_size, kv_bits=bits)


def _replay(model, ids, steps, step, fed=None, quant=None):
    """generate_step with the argmax sampler, written out, on rotating caches (quant None) or on
    the model's caches quantized as kv_bits asks (quant = (bits, group_size, start)): (fed [steps],
    generated [steps], logits [steps, V], logprobs [steps, V]). With `fed` given, those tokens are
    fed (teacher forcing) instead of the argmax of the previous step."""
    cache = _rotating_cache(model) if quant is None else make_prompt_cache(model)
    y = _prefill(model, cache, ids, step, quant)
    fed_out, gen, all_logits, all_logprobs = [], [], [], []
    for i in range(steps):
        if fed is not None:
            y = mx.array([int(fed[i])])
        fed_out.append(y.item())
        logits = model(y[None], cache=cache)[:, -1, :]
        _maybe_quantize(cache, quant)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        y = mx.argmax(logprobs, axis=-1)
        mx.eval(y, logits, logprobs)
        gen.append(y.item())
        all_logits.append(logits[0])
        all_logprobs.append(logprobs[0])
    return (np.array(fed_out, dtype=np.int32), np.array(gen, dtype=np.int32),
            mx.stack(all_logits), mx.stack(all_logprobs))


def _check_generate_step(model, ids, steps, step, run, what, quant=None):
    """mlx_lm's own generate_step (on rotating caches, or with kv_bits) must give the replay's
    tokens and bits."""
    tokens, lps = [], []
    if quant is None:
        kw = {"prompt_cache": _rotating_cache(model)}
    else:
        kw = {"kv_bits": quant[0], "kv_group_size": quant[1], "quantized_kv_start": quant[2]}
    for tok, lp in generate_step(mx.array(ids), model, max_tokens=steps, prefill_step_size=step, **kw):
        tokens.append(tok)
        lps.append(lp)
    if not np.array_equal(np.array(tokens, dtype=np.int32), run[1]):
        raise AssertionError(f"{what}: generate_step tokens differ from the replay")
    models._assert_same_bits(mx.stack(lps), run[3], f"{what}: generate_step logprobs vs the replay")


def _pick_prompt(model, dtype, first_seed, n, steps, step, quant=None):
    """First prompt seed >= first_seed whose greedy run has no near-tie (models.py's margin
    rule)."""
    for seed in range(first_seed, first_seed + 100):
        ids = models._ids(seed, n)
        run = _replay(model, ids, steps, step, quant=quant)
        margins, thresholds = models._margins(run[2], run[3], dtype)
        if np.all(margins > thresholds):
            return seed, ids, run, margins
    raise RuntimeError(f"no prompt seed in [{first_seed}, {first_seed + 100}) without a near-tie")


def _cache_params(quant):
    if quant is None:
        return {"max_kv_size": MAX_KV_SIZE}
    return {"kv_bits": quant[0], "kv_group_size": quant[1], "quantized_kv_start": quant[2]}


def _decode_case(model, ref_model, ckpt, dtype, cases_dir, quant=None):
    prompt_len, steps, step = 30, 20, 16
    sub = "rotating/decode" if quant is None else "quantized/decode"
    seed, ids, run, _ = _pick_prompt(model, dtype, 6000, prompt_len, steps, step, quant)
    _check_generate_step(model, ids, steps, step, run, f"{ckpt} {sub}", quant)
    fed, _, logits, logprobs = run
    params = {
        "prefill_step_size": step,
        "prompt_seed": seed,
        "prompt_length": prompt_len,
        "steps": steps,
        "sampler": "argmax",
        "margin_rule": models._margin_rule(dtype),
        **_cache_params(quant),
    }
    refs = None
    if ref_model is not None:
        _, _, rl, rlp = _replay(ref_model, ids, steps, step, fed=fed, quant=quant)
        refs = {"logits": models._f32(rl), "logprobs": models._f32(rlp)}
    return models._write(cases_dir, ckpt, dtype, sub, "decode", "model_logits", params,
                         {"ids": ids},
                         {"tokens": fed, "logits": logits, "logprobs": logprobs},
                         {"tokens": "model_tokens", "logits": "model_logits", "logprobs": "model_logits"},
                         refs)


def _greedy_case(model, ref_model, ckpt, dtype, cases_dir, quant=None):
    prompt_len, max_tokens, step = 21, 32, 5
    sub = "rotating/greedy" if quant is None else "quantized/greedy"
    seed, ids, run, margins = _pick_prompt(model, dtype, 7000, prompt_len, max_tokens, step, quant)
    _check_generate_step(model, ids, max_tokens, step, run, f"{ckpt} {sub}", quant)
    params = {
        "prefill_step_size": step,
        "prompt_seed": seed,
        "prompt_length": prompt_len,
        "max_tokens": max_tokens,
        "sampler": "argmax",
        "margin_rule": models._margin_rule(dtype),
        **_cache_params(quant),
    }
    if ref_model is not None:
        # MLX's own error on these steps (see models._greedy_case).
        _, _, _, rlp = _replay(ref_model, ids, max_tokens, step,
                               fed=np.concatenate([ids[-1:], run[1][:-1]]), quant=quant)
        err = np.abs(models._f64(run[3]) - models._f64(rlp)).max()
        params["oracle_logprob_error"] = float(np.float32(err))
    return models._write(cases_dir, ckpt, dtype, sub, "greedy", "model_tokens", params,
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
        entries.append(_decode_case(model, ref_model, ckpt, dtype, cases_dir, QUANT_DECODE))
        entries.append(_greedy_case(model, ref_model, ckpt, dtype, cases_dir, QUANT_GREEDY))
    return entries
