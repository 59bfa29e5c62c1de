"""Speculative decoding fixtures: mlx_lm's speculative_generate_step on the tiny checkpoints.

Called by generate.py as `speculative.generate(out_dir, models_dir)` after models.generate wrote the
checkpoints. Writes <out_dir>/cases.json (kept out of manifest.json's case index, like the real-model
fixtures): for each case the target and draft checkpoints (directories under models_dir, the same
vocabulary), the prompt ids, num_draft_tokens, max_tokens, prefill_step_size, and what
speculative_generate_step yields with the default (argmax) sampler: the tokens and, per token,
from_draft. Each case also records generate_step's greedy tokens for the same prompt
(`greedy_tokens`) and whether they are the same (`same_as_greedy`): with argmax both models' picks
decide acceptance, so the speculative tokens are the greedy ones unless a verify window (several
positions in one forward) breaks a near-tie another way than single-token steps.

KV_CASES add speculative decoding on quantized caches (kv_bits, kv_group_size and
quantized_kv_start recorded in the case; greedy_tokens then from generate_step with the same
arguments).

Go checks (generate/speculative_oracle_test.go): the mlx backend byte-identical tokens and
from_draft; the cpu backend the exact tokens on the f32 checkpoints.
"""

import os

import mlx.core as mx
import numpy as np

from mlx_lm.generate import generate_step, speculative_generate_step

import common
import models

PROMPT_SEED = 7000
PROMPT_LENGTH = 20  # more than one prefill chunk
MAX_TOKENS = 24

# (target, draft, num_draft_tokens): the target drafting for itself (every draft accepted), and
# drafts of other checkpoints of the same vocabulary (some rejected).
CASES = [
    ("optiq", "optiq", 3),
    ("optiq", "q4g64", 2),
    ("q8g32", "q4g64", 4),
    ("fp", "tied", 3),
]

# (target, draft, num_draft_tokens, kv_bits, kv_group_size, quantized_kv_start): speculative decoding
# on quantized caches (speculative_generate_step's kv_bits: the target's and the draft's caches
# quantized once they hold quantized_kv_start tokens). Start 0 converts after the prompt's prefill;
# start 27 converts inside a verify window part way through the generation (on the drafts too,
# before the rejected ones are trimmed).
KV_CASES = [
    ("optiq", "q4g64", 2, 8, 32, 0),
    ("q8g32", "q4g64", 3, 4, 32, 27),
]


def _run(model, draft, ids, k, **kv):
    gen = speculative_generate_step(
        mx.array(ids), model, draft, num_draft_tokens=k, max_tokens=MAX_TOKENS,
        prefill_step_size=models.PREFILL_STEP, **kv,
    )
    tokens, from_draft = [], []
    for tok, _, fd in gen:
        tokens.append(int(tok))
        from_draft.append(bool(fd))
    return tokens, from_draft


def _greedy(model, ids, **kv):
    gen = generate_step(mx.array(ids), model, max_tokens=MAX_TOKENS, prefill_step_size=models.PREFILL_STEP, **kv)
    return [int(tok) for tok, _ in gen]


def generate(out_dir, models_dir):
    """Write out_dir/cases.json from the checkpoints under models_dir."""
    mx.set_default_device(mx.cpu)
    os.makedirs(out_dir, exist_ok=True)
    loaded = {}

    def load(ckpt):
        if ckpt not in loaded:
            loaded[ckpt] = models._load_with_mlx_lm(os.path.join(models_dir, ckpt))
        return loaded[ckpt]

    cases = []
    for i, (target, draft, k) in enumerate(CASES):
        for suffix, dtype in models.DTYPES:
            t_ckpt, d_ckpt = f"{target}-{suffix}", f"{draft}-{suffix}"
            ids = models._ids(PROMPT_SEED + i, PROMPT_LENGTH)
            tokens, from_draft = _run(load(t_ckpt), load(d_ckpt), ids, k)
            greedy = _greedy(load(t_ckpt), ids)
            if dtype == mx.float32 and tokens != greedy:
                raise AssertionError(f"{t_ckpt} drafted by {d_ckpt}: speculative tokens differ from greedy")
            if target == draft and not all(from_draft[j] for j in range(len(tokens)) if (j + 1) % (k + 1)):
                raise AssertionError(f"{t_ckpt} drafting for itself rejected a draft")
            cases.append({
                "name": f"{t_ckpt}/draft-{d_ckpt}/k{k}",
                "target": t_ckpt,
                "draft": d_ckpt,
                "dtype": common.dtype_name(dtype),
                "num_draft_tokens": k,
                "max_tokens": MAX_TOKENS,
                "prefill_step_size": models.PREFILL_STEP,
                "sampler": "argmax",
                "prompt": [int(x) for x in np.asarray(ids)],
                "tokens": tokens,
                "from_draft": from_draft,
                "greedy_tokens": greedy,
                "same_as_greedy": tokens == greedy,
            })
    for i, (target, draft, k, bits, group, start) in enumerate(KV_CASES):
        kv = {"kv_bits": bits, "kv_group_size": group, "quantized_kv_start": start}
        for suffix, dtype in models.DTYPES:
            t_ckpt, d_ckpt = f"{target}-{suffix}", f"{draft}-{suffix}"
            ids = models._ids(PROMPT_SEED + len(CASES) + i, PROMPT_LENGTH)
            tokens, from_draft = _run(load(t_ckpt), load(d_ckpt), ids, k, **kv)
            greedy = _greedy(load(t_ckpt), ids, **kv)
            cases.append({
                "name": f"{t_ckpt}/draft-{d_ckpt}/k{k}/kv{bits}g{group}s{start}",
                "target": t_ckpt,
                "draft": d_ckpt,
                "dtype": common.dtype_name(dtype),
                "num_draft_tokens": k,
                "max_tokens": MAX_TOKENS,
                "prefill_step_size": models.PREFILL_STEP,
                "sampler": "argmax",
                "prompt": [int(x) for x in np.asarray(ids)],
                "tokens": tokens,
                "from_draft": from_draft,
                "greedy_tokens": greedy,
                "same_as_greedy": tokens == greedy,
                **kv,
            })
    common.write_json(os.path.join(out_dir, "cases.json"), {
        "format": common.FORMAT_VERSION,
        "oracle": common.versions(),
        "models": os.path.relpath(models_dir, out_dir),
        "cases": cases,
    })
    return len(cases)
