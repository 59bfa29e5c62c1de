"""Model-level fixtures: tiny MiniCPM5-shaped Llama checkpoints and what mlx_lm computes with them.

Called by generate.py as `models.generate(out_dir)`. Layout and case list: conformance/README.md,
section "Model fixtures". Everything is computed on MLX's CPU device from the model exactly as
`mlx_lm.load` returns it, so a Go loader that reads the same directory must reproduce it.

Steps, per checkpoint and activation dtype:
  1. seeded float32 weights (the same for every checkpoint; see _float_weights);
  2. build mlx_lm.models.llama.Model, set the weights (cast to bf16 for the -bf16 variants),
     quantize with mlx_lm.utils.quantize_model (so config.json gets the quantization block as
     mlx_lm writes it), save with mlx_lm.utils.save_model + save_config;
  3. load the directory back with mlx_lm.load and write the cases from that model.
"""

import contextlib
import io
import json
import os
import tempfile
import zlib

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_map

import mlx_lm
from mlx_lm.generate import generate_step
from mlx_lm.models import llama
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import quantize_model, save_config, save_model

import common

# Shapes: MiniCPM5-1B scaled down, keeping what makes it special: GQA 8:1 and an explicit head_dim
# that is not hidden_size / num_attention_heads (128 / 16 = 8, head_dim is 32).
BASE_CONFIG = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 384,
    "num_hidden_layers": 3,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # With head_dim 32 and theta 1e4 the wavelengths 2*pi*1e4^(2i/32) fall in all three bands of
    # Llama3RoPE for this value: < 16 (kept), 16..64 (smoothed), > 64 (divided by factor).
    "original_max_position_embeddings": 64,
}

WEIGHT_SEED = 20240601  # one seed for every checkpoint's float weights
PREFILL_STEP = 16  # prefill chunk size used by every chunked case
DTYPES = [("f32", mx.float32), ("bf16", mx.bfloat16)]

# f32 margin rule: float32 implementations that differ only in summation order agree on these
# logits (|logit| < ~60) to well under 1e-4 after 3 layers; 1e-3 leaves a 10x headroom.
F32_MARGIN = 1e-3
# bf16 margin rule: the top-two gap must exceed this many bf16 ulps of the largest magnitude
# involved (top logit, top and second logprob): a Go result that is off by one rounding in the
# logits or in the logsumexp subtraction can then not swap the argmax.
BF16_MARGIN_ULPS = 2


def _quant(bits, group_size, mode=True):
    """A per-layer quantization dict as mlx_lm's recipes write it (mode optional)."""
    d = {"group_size": group_size, "bits": bits}
    if mode:
        d["mode"] = "affine"
    return d


def _optiq_predicate(path, module):
    """OptiQ-like mix: 8-bit g64 for sensitive layers, global 4-bit g64 for the rest.

    8-bit: every o_proj and gate_proj, the whole last block, lm_head. The o_proj/gate_proj entries
    carry "mode": "affine" (the form mlx_lm.convert's mixed recipes write); the last block and
    lm_head entries have no "mode" (the form mlx_lm.quant.dynamic_quant writes), so the fixtures
    cover both spellings. Returning True keeps the global parameters and writes no entry.
    """
    last = BASE_CONFIG["num_hidden_layers"] - 1
    if path == "lm_head" or path.startswith(f"model.layers.{last}."):
        return _quant(8, 64, mode=False)
    if path.endswith(".o_proj") or path.endswith(".gate_proj"):
        return _quant(8, 64)
    return True


# name -> (config overrides, quantization: None or (bits, group_size, predicate))
CHECKPOINTS = {
    "q4g64": ({}, (4, 64, None)),
    "optiq": ({}, (4, 64, _optiq_predicate)),
    "q8g32": ({}, (8, 32, None)),
    # Unquantized weights are 4-8x larger than packed ones: two layers keep the
    # fixture set under its ~25 MB budget and still test every path.
    "fp": ({"num_hidden_layers": 2}, None),
    "tied": ({"tie_word_embeddings": True}, (4, 64, None)),
    "llama3rope": ({"rope_scaling": LLAMA3_ROPE}, (4, 64, None)),
}


def _float_weights(config):
    """Seeded float32 weights for every parameter of the (unquantized) model.

    Each tensor has its own generator seeded from (WEIGHT_SEED, crc32(name)), so a tensor's values
    do not depend on which other tensors exist (the tied model simply has no lm_head).

    Scales. Random std-0.02 weights would give nearly tied logits, so argmax (and the fixtures)
    would be decided by rounding noise. Instead:
      embed_tokens      N(0, 1): a residual stream of unit scale;
      norms             1 + 0.05 N(0, 1): near 1 but not exactly, so the multiply by weight matters;
      q, k, v, gate, up N(0, 1/fan_in): each projection's output at unit scale (attention scores
                        of std ~1, so attention is neither uniform nor one-hot);
      o_proj, down_proj N(0, 4/fan_in): each block adds about twice the unit scale to the residual
                        stream, so the layers, not the token embedding, dominate the final hidden
                        state (residual std ~2.2, 3.0, 3.5 after the three layers);
      lm_head           N(0, 16/fan_in) with every row (token) further scaled by exp(0.5 N(0, 1)):
                        logits of std ~5, and a token-frequency-like prior, as trained models have.
    Without the per-token scale the 1000 logits are plain Gaussian, and in bf16 the top two are
    often within one rounding step of each other (often exactly tied), so that a 32-token greedy
    run almost never clears the margin rule (BF16_MARGIN_ULPS). With it, roughly one prompt in
    five to seven clears it for bf16, and almost every prompt for float32.
    The tied checkpoint has no lm_head: its logits are embed_tokens rows (std 1) against the final
    hidden state, std ~11, and the input token's own row dominates (random tied models copy their
    input), so its greedy runs mostly repeat one token. That still checks the tied head exactly.
    """
    model = llama.Model(llama.ModelArgs.from_dict(config))
    out = {}
    for name, p in tree_flatten(model.parameters()):
        rng = np.random.default_rng([WEIGHT_SEED, zlib.crc32(name.encode())])
        z = rng.standard_normal(p.shape, dtype=np.float32)
        fan_in = p.shape[-1]
        if name.endswith("norm.weight"):
            w = 1.0 + 0.05 * z
        elif name == "model.embed_tokens.weight":
            w = z
        elif name == "lm_head.weight":
            rows = np.random.default_rng([WEIGHT_SEED, zlib.crc32(name.encode()), 1])
            token_scale = np.exp(0.5 * rows.standard_normal((p.shape[0], 1), dtype=np.float32))
            w = z * (4.0 / np.sqrt(fan_in)) * token_scale
        elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            w = z * (2.0 / np.sqrt(fan_in))
        else:  # q, k, v, gate, up: [out, in]
            w = z / np.sqrt(fan_in)
        out[name] = w.astype(np.float32)
    return out


def _write_checkpoint(path, name, dtype):
    """Build, quantize and save one checkpoint exactly as mlx_lm saves a model."""
    overrides, quant = CHECKPOINTS[name]
    config = dict(BASE_CONFIG, **overrides)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights = {k: mx.array(v).astype(dtype) for k, v in _float_weights(config).items()}
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    if quant is not None:
        bits, group_size, predicate = quant
        # quantize_model prints "[INFO] Quantized model with N bits per weight."; keep stdout clean.
        with contextlib.redirect_stdout(io.StringIO()):
            model, config = quantize_model(
                model, config, group_size=group_size, bits=bits, quant_predicate=predicate
            )
    save_model(path, model)
    save_config(config, os.path.join(path, "config.json"))


def _load_with_mlx_lm(path):
    """mlx_lm.load(path) and return the model.

    mlx_lm.load also loads a tokenizer, which a fixture checkpoint does not have (and Go does not
    need). So load from a temporary directory that links the checkpoint's files and adds a trivial
    word-level tokenizer; the model half of mlx_lm.load (utils.load_model) only reads config.json
    and model*.safetensors, which are the linked fixture files.
    """
    vocab = {f"t{i}": i for i in range(BASE_CONFIG["vocab_size"])}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for f in sorted(os.listdir(path)):
            os.symlink(os.path.abspath(os.path.join(path, f)), os.path.join(tmp, f))
        with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
            json.dump(tokenizer, f)
        with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast"}, f)
        model, _ = mlx_lm.load(tmp)
    return model


def _ids(seed, n):
    """Seeded prompt token ids in [0, vocab), int32."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, BASE_CONFIG["vocab_size"], size=n, dtype=np.int32)


def _raw(a):
    """Raw bytes of an mx.array (bf16 through its uint16 bit pattern), for bit-exact comparison."""
    if a.dtype == mx.bfloat16:
        a = a.view(mx.uint16)
    return a.dtype, a.shape, np.array(a).tobytes()


def _assert_same_bits(a, b, what):
    if _raw(a) != _raw(b):
        raise AssertionError(f"{what}: arrays differ bitwise")


def _bf16_ulp(x):
    """Spacing of bfloat16 numbers at magnitude |x| (8 significant bits)."""
    x = abs(float(x))
    if x == 0.0:
        return 2.0**-133
    return 2.0 ** (np.floor(np.log2(x)) - 7)


def _upcast(model):
    """The same model with every bfloat16 parameter cast to float32 (exactly: bf16 widens
    without rounding). Quantized codes stay as they are. Running it gives the bf16 checkpoint's
    own function computed in float32 throughout: the reference that bf16 cases' errors are
    measured against (stored as ref.* in float64), so a backend can be held to be at least as
    accurate as MLX is on the same weights."""
    model.update(tree_map(lambda p: p.astype(mx.float32) if p.dtype == mx.bfloat16 else p,
                          model.parameters()))
    mx.eval(model.parameters())
    return model


def _f64(a):
    return np.array(a.astype(mx.float32), dtype=np.float64)


def _f32(a):
    """A float32 reference (the upcast model computes in float32), stored as F32."""
    return np.array(a.astype(mx.float32), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Computations (each mirrors mlx_lm; see mlx_lm/generate.py generate_step)


def _prefill_logits(model, ids, step):
    """Run ids through a fresh prompt cache in chunks of `step`; return all logits [N, V].

    After each chunk the cache state is eval'd, as generate_step does after each prefill chunk.
    """
    cache = make_prompt_cache(model)
    tokens = mx.array(ids)
    chunks = []
    for start in range(0, len(ids), step):
        logits = model(tokens[start : start + step][None], cache=cache)
        mx.eval([c.state for c in cache], logits)
        chunks.append(logits[0])
    out = mx.concatenate(chunks, axis=0)
    mx.eval(out)
    return out


def _greedy_replay(model, ids, steps, step):
    """generate_step with the argmax sampler, written out so the raw logits are visible.

    Prefill all prompt tokens but the last in chunks of `step` (eval'ing the cache after each),
    then `steps` single-token steps: step 0 feeds the last prompt token, step i > 0 feeds the
    argmax of step i-1. Returns (fed tokens [steps], generated tokens [steps], logits [steps, V],
    logprobs [steps, V]); logprobs = logits - logsumexp(logits), in the model dtype.
    """
    cache = make_prompt_cache(model)
    prompt = mx.array(ids)
    while prompt.size > 1:
        n = min(step, prompt.size - 1)
        model(prompt[:n][None], cache=cache)
        mx.eval([c.state for c in cache])
        prompt = prompt[n:]
    y = prompt
    fed, gen, all_logits, all_logprobs = [], [], [], []
    for _ in range(steps):
        fed.append(y.item())
        logits = model(y[None], cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        y = mx.argmax(logprobs, axis=-1)
        mx.eval(y, logits, logprobs)
        gen.append(y.item())
        all_logits.append(logits[0])
        all_logprobs.append(logprobs[0])
    return (
        np.array(fed, dtype=np.int32),
        np.array(gen, dtype=np.int32),
        mx.stack(all_logits),
        mx.stack(all_logprobs),
    )


def _forced_replay(model, ids, fed, step):
    """_greedy_replay with the fed tokens given (teacher forcing): logits and logprobs per step."""
    cache = make_prompt_cache(model)
    prompt = mx.array(ids)
    while prompt.size > 1:
        n = min(step, prompt.size - 1)
        model(prompt[:n][None], cache=cache)
        mx.eval([c.state for c in cache])
        prompt = prompt[n:]
    all_logits, all_logprobs = [], []
    for t in fed:
        logits = model(mx.array([[int(t)]]), cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        mx.eval(logits, logprobs)
        all_logits.append(logits[0])
        all_logprobs.append(logprobs[0])
    return mx.stack(all_logits), mx.stack(all_logprobs)


def _margins(logits, logprobs, dtype):
    """Per step: (top1 - top2 of the logprobs as float32, the threshold that margin must beat)."""
    lp = np.array(logprobs.astype(mx.float32))
    lg = np.array(logits.astype(mx.float32))
    top2 = np.sort(lp, axis=-1)[:, -2:]
    margins = (top2[:, 1] - top2[:, 0]).astype(np.float32)
    if dtype == mx.float32:
        thresholds = np.full(len(margins), F32_MARGIN)
    else:
        scale = np.maximum(np.abs(lg.max(axis=-1)), np.abs(top2).max(axis=-1))
        thresholds = np.array([BF16_MARGIN_ULPS * _bf16_ulp(s) for s in scale])
    return margins, thresholds


def _pick_prompt(model, dtype, first_seed, n, steps):
    """First prompt seed >= first_seed whose greedy run has no near-tie at any step."""
    for seed in range(first_seed, first_seed + 100):
        ids = _ids(seed, n)
        run = _greedy_replay(model, ids, steps, PREFILL_STEP)
        margins, thresholds = _margins(run[2], run[3], dtype)
        if np.all(margins > thresholds):
            return seed, ids, run, margins
    raise RuntimeError(f"no prompt seed in [{first_seed}, {first_seed + 100}) without a near-tie")


def _margin_rule(dtype):
    if dtype == mx.float32:
        return f"top1-top2 logprob > {F32_MARGIN} at every step"
    return (
        f"top1-top2 logprob > {BF16_MARGIN_ULPS} bf16 ulps of max(|top logit|, |top1 logprob|, "
        "|top2 logprob|) at every step"
    )


# ---------------------------------------------------------------------------------------------
# Cases


def _write(cases_dir, ckpt, dtype, sub, op, main, params, inputs, outputs, tolerances,
           references=None):
    """write_case for a model case; `main` is its tolerance class, `tolerances` each output's,
    `references` the float64 references (bf16 checkpoints only, from the upcast model)."""
    assert main in tolerances.values() and set(tolerances) == set(outputs)
    return common.write_case(
        cases_dir,
        f"model/{ckpt}/{sub}",
        kind="model",
        op=op,
        dtype=common.dtype_name(dtype),
        params=params,
        inputs=inputs,
        outputs=outputs,
        tolerance=main,
        references=references,
        extra={"checkpoint": "..", "output_tolerance": tolerances},
    )


def _check_generate_step(model, ids, steps, run, what):
    """Assert that mlx_lm's generate_step yields the replay's tokens and bit-identical logprobs."""
    tokens, lps = [], []
    gen = generate_step(mx.array(ids), model, max_tokens=steps, prefill_step_size=PREFILL_STEP)
    for tok, lp in gen:
        tokens.append(tok)
        lps.append(lp)
    if not np.array_equal(np.array(tokens, dtype=np.int32), run[1]):
        raise AssertionError(f"{what}: generate_step tokens differ from the replay")
    _assert_same_bits(mx.stack(lps), run[3], f"{what}: generate_step logprobs vs the replay")


# MLX's chunked and one-shot prefill logits are bit-identical on every checkpoint;
# the one-shot case is kept for two checkpoints only, to save fixture space.
ONESHOT_CHECKPOINTS = ("optiq-f32", "optiq-bf16")


def _prefill_cases(model, ref_model, ckpt, dtype, cases_dir):
    """prefill/lenN: chunked prefill through a fresh KV cache, logits of every position."""
    entries = []
    for n, step, sub in [
        (1, PREFILL_STEP, "prefill/len1"),
        (7, PREFILL_STEP, "prefill/len7"),
        (24, PREFILL_STEP, "prefill/len24"),
        (24, 24, "prefill/len24/oneshot"),
    ]:
        if sub.endswith("oneshot") and ckpt not in ONESHOT_CHECKPOINTS:
            continue
        seed = 1000 + n  # len24 and len24/oneshot share their prompt
        ids = _ids(seed, n)
        logits = _prefill_logits(model, ids, step)
        params = {"prefill_step_size": step, "prompt_seed": seed, "length": n}
        refs = None
        if ref_model is not None:
            refs = {"logits": _f32(_prefill_logits(ref_model, ids, step))}
        entries.append(
            _write(cases_dir, ckpt, dtype, sub, "prefill", "model_logits", params,
                   {"ids": ids}, {"logits": logits}, {"logits": "model_logits"}, refs)
        )
    return entries


def _hidden_states(model, ids):
    """The residual stream after every layer, the final norm and the logits, for one call
    without a cache, run layer by layer exactly as LlamaModel.__call__ does."""
    x = mx.array(ids)[None]
    inner = model.model
    h = inner.embed_tokens(x)
    mask = create_attention_mask(h, None)  # cache None and n > 1: "causal"
    outputs = {}
    for i, layer in enumerate(inner.layers):
        h = layer(h, mask, cache=None)
        outputs[f"h.{i}"] = h[0]
    norm = inner.norm(h)
    if model.args.tie_word_embeddings:
        logits = inner.embed_tokens.as_linear(norm)
    else:
        logits = model.lm_head(norm)
    mx.eval(list(outputs.values()), norm, logits)
    outputs["norm"], outputs["logits"] = norm[0], logits[0]
    return outputs, logits


def _hidden_case(model, ref_model, ckpt, dtype, cases_dir):
    """hidden/len7: one call without a cache, the residual stream after every layer.

    Checks that the layer-by-layer logits are bit-identical to model(ids).
    """
    seed, n = 2007, 7
    ids = _ids(seed, n)
    outputs, logits = _hidden_states(model, ids)
    _assert_same_bits(logits, model(mx.array(ids)[None]), f"{ckpt} hidden/len7 logits vs model(ids)")
    tolerances = {k: ("model_logits" if k == "logits" else "model_hidden") for k in outputs}
    refs = None
    if ref_model is not None:
        refs = {k: _f32(v) for k, v in _hidden_states(ref_model, ids)[0].items()}
    params = {"prompt_seed": seed, "length": n}
    return _write(cases_dir, ckpt, dtype, "hidden/len7", "hidden", "model_hidden", params,
                  {"ids": ids}, outputs, tolerances, refs)


def _decode_case(model, ref_model, ckpt, dtype, cases_dir):
    """decode/steps8: generate_step's single-token steps after a chunked prefill, raw logits."""
    prompt_len, steps = 9, 8
    seed, ids, run, _ = _pick_prompt(model, dtype, 3000, prompt_len, steps)
    _check_generate_step(model, ids, steps, run, f"{ckpt} decode/steps8")
    fed, _, logits, logprobs = run
    params = {
        "prefill_step_size": PREFILL_STEP,
        "prompt_seed": seed,
        "prompt_length": prompt_len,
        "steps": steps,
        "sampler": "argmax",
        "margin_rule": _margin_rule(dtype),
    }
    refs = None
    if ref_model is not None:
        rl, rlp = _forced_replay(ref_model, ids, fed, PREFILL_STEP)
        refs = {"logits": _f32(rl), "logprobs": _f32(rlp)}
    return _write(cases_dir, ckpt, dtype, "decode/steps8", "decode", "model_logits", params,
                  {"ids": ids},
                  {"tokens": fed, "logits": logits, "logprobs": logprobs},
                  {"tokens": "model_tokens", "logits": "model_logits", "logprobs": "model_logits"},
                  refs)


def _greedy_case(model, ref_model, ckpt, dtype, cases_dir):
    """greedy/32: the tokens of mlx_lm's generate_step with the default (argmax) sampler."""
    prompt_len, max_tokens = 12, 32
    seed, ids, run, margins = _pick_prompt(model, dtype, 4000, prompt_len, max_tokens)
    # The replay chose the seed and gave the margins; it must be what generate_step does.
    _check_generate_step(model, ids, max_tokens, run, f"{ckpt} greedy/32")
    params = {
        "prefill_step_size": PREFILL_STEP,
        "prompt_seed": seed,
        "prompt_length": prompt_len,
        "max_tokens": max_tokens,
        "sampler": "argmax",
        "margin_rule": _margin_rule(dtype),
    }
    if ref_model is not None:
        # MLX's own error on these steps: its bf16 logprobs against the float32 run of the same
        # weights, fed the same tokens. A backend that is at least as accurate as MLX may
        # legitimately pick another token only where the oracle's margin is within this noise.
        _, rlp = _forced_replay(ref_model, ids, np.concatenate([ids[-1:], run[1][:-1]]), PREFILL_STEP)
        err = np.abs(_f64(run[3]) - _f64(rlp)).max()
        params["oracle_logprob_error"] = float(np.float32(err))
    return _write(cases_dir, ckpt, dtype, "greedy/32", "greedy", "model_tokens", params,
                  {"ids": ids}, {"tokens": run[1], "margins": margins},
                  {"tokens": "model_tokens", "margins": "oracle_info"})


def generate(out_dir):
    """Write every checkpoint and its cases under out_dir; return the manifest entries."""
    mx.set_default_device(mx.cpu)
    entries = []
    for name in sorted(CHECKPOINTS):
        for suffix, dtype in DTYPES:
            ckpt = f"{name}-{suffix}"
            path = os.path.join(out_dir, ckpt)
            _write_checkpoint(path, name, dtype)
            model = _load_with_mlx_lm(path)
            ref_model = _upcast(_load_with_mlx_lm(path)) if dtype == mx.bfloat16 else None
            cases_dir = os.path.join(path, "cases")
            entries += _prefill_cases(model, ref_model, ckpt, dtype, cases_dir)
            entries.append(_hidden_case(model, ref_model, ckpt, dtype, cases_dir))
            entries.append(_decode_case(model, ref_model, ckpt, dtype, cases_dir))
            entries.append(_greedy_case(model, ref_model, ckpt, dtype, cases_dir))
    return entries
