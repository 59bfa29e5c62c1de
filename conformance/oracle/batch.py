"""Batch generation fixtures: mlx_lm's BatchGenerator and batch_generate on the tiny checkpoints.

Called by generate.py as `batch.generate(out_dir, models_dir)` after models.generate has written
the checkpoints under models_dir. For each checkpoint of CHECKPOINTS it writes, under
out_dir/<checkpoint>/:

  <case>.json          the run's settings and results (below)
  <case>.safetensors   "<i>.logprobs" [n_i, vocab] in the model dtype: for prompt i, the
                       logprobs row each handed-out token was sampled from (after the
                       processors), in order, the stop token included

Cases (six prompts of lengths 5, 1, 12, 3, 9, 2, max tokens 8, 6, 10, 4, 7, 9; prefill in chunks
of 4 tokens, 2 prompts prefilled at a time, 3 sequences decoding at a time, so prompts are
right-padded and rolled, and rows join the decoding batch while others decode):

  greedy    the fallback (argmax) sampler for every row and one stop token (the third token
            prompt 0 generates alone); also checked against batch_generate's token ids
  rotating  greedy as above on rotating caches of MAX_KV_SIZE slots: an empty
            RotatingKVCache(MAX_KV_SIZE) per layer and prompt handed to insert (mlx_lm 0.32.2's
            make_prompt_cache ignores max_kv_size for models with make_cache, llama's among
            them), which BatchGenerator merges into BatchRotatingKVCache (keep 0): prompts
            longer than the window, decode wrapping it, rows joining and leaving; field
            max_kv_size
  sampled   mx.random.seed(SEED); prompts 1, 3, 5 each with a sampler of their own
            (make_sampler(temp=0.9, top_p=0.95), distinct objects, so each is sampled on its
            own row and the rows draw keys from the shared state in row order); prompt 4 with
            make_logits_processors(repetition_penalty=1.3); the others greedy

JSON fields: prompts, max_tokens, stop_tokens, prefill_step_size, prefill_batch_size,
completion_batch_size, seed (sampled), samplers / processors (per prompt, null = default),
tokens (per prompt, every handed-out token, the stop token included), finish_reasons,
steps (for each next_generated() call that handed out tokens, the prompt index of each token in
response order), and for greedy: alone (per prompt, the tokens mlx_lm's generate_step gives for
that prompt alone, with the same chunk size, max tokens and stop token, the stop token included)
and alone_equal (whether the batch row gave exactly those).
"""

import os
import types

import mlx.core as mx
import numpy as np

from mlx_lm.generate import BatchGenerator, batch_generate, generate_step
from mlx_lm.models.cache import RotatingKVCache
from mlx_lm.sample_utils import make_logits_processors, make_sampler

import common
import models

CHECKPOINTS = ["fp-f32", "optiq-f32", "q8g32-f32", "optiq-bf16"]
LENGTHS = [5, 1, 12, 3, 9, 2]
MAX_TOKENS = [8, 6, 10, 4, 7, 9]
PREFILL_STEP = 4
PREFILL_BATCH = 2
COMPLETION_BATCH = 3
SEED = 77
SAMPLED_ROWS = (1, 3, 5)
SAMPLER = {"temp": 0.9, "top_p": 0.95}
PENALTY_ROW = 4
PROCESSORS = {"repetition_penalty": 1.3}
MAX_KV_SIZE = 8  # the rotating case's window: shorter than prompts 2 and 4, and most sequences


def _prompts():
    return [models._ids(6000 + i, n).tolist() for i, n in enumerate(LENGTHS)]


def _alone(model, prompt, max_tokens, stop):
    """generate_step on one prompt, stopping after the stop token (included)."""
    out = []
    for tok, _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens,
                                prefill_step_size=PREFILL_STEP):
        out.append(int(tok))
        if tok in stop:
            break
    return out


def _run(model, prompts, stop, samplers=None, processors=None, caches=None):
    """BatchGenerator over prompts: tokens, logprob rows, finish reasons and step order."""
    gen = BatchGenerator(model, stop_tokens=[[t] for t in stop], prefill_step_size=PREFILL_STEP,
                         prefill_batch_size=PREFILL_BATCH, completion_batch_size=COMPLETION_BATCH)
    uids = gen.insert(prompts, MAX_TOKENS, caches=caches, samplers=samplers,
                      logits_processors=processors)
    index = {u: i for i, u in enumerate(uids)}
    tokens = [[] for _ in prompts]
    rows = [[] for _ in prompts]
    finish = [None] * len(prompts)
    steps = []
    while responses := gen.next_generated():
        step = []
        for r in responses:
            i = index[r.uid]
            step.append(i)
            tokens[i].append(int(r.token))
            rows[i].append(r.logprobs)
            if r.finish_reason is not None:
                finish[i] = r.finish_reason
        steps.append(step)
    gen.close()
    return tokens, rows, finish, steps


def _write(out_dir, ckpt, case, meta, rows):
    d = os.path.join(out_dir, ckpt)
    os.makedirs(d, exist_ok=True)
    common.write_safetensors(os.path.join(d, case + ".safetensors"),
                             {f"{i}.logprobs": mx.stack(r) for i, r in enumerate(rows)})
    common.write_json(os.path.join(d, case + ".json"), meta)


def generate(out_dir, models_dir):
    mx.set_default_device(mx.cpu)
    prompts = _prompts()
    for ckpt in CHECKPOINTS:
        model = models._load_with_mlx_lm(os.path.join(models_dir, ckpt))
        stop = [_alone(model, prompts[0], MAX_TOKENS[0], [])[2]]
        base = {
            "checkpoint": ckpt,
            "prompts": prompts,
            "max_tokens": MAX_TOKENS,
            "stop_tokens": stop,
            "prefill_step_size": PREFILL_STEP,
            "prefill_batch_size": PREFILL_BATCH,
            "completion_batch_size": COMPLETION_BATCH,
        }

        tokens, rows, finish, steps = _run(model, prompts, stop)
        tok = types.SimpleNamespace(eos_token_ids=stop, decode=lambda ids: "")
        ref = batch_generate(model, tok, prompts, max_tokens=MAX_TOKENS, return_token_ids=True,
                             prefill_step_size=PREFILL_STEP, prefill_batch_size=PREFILL_BATCH,
                             completion_batch_size=COMPLETION_BATCH)
        for i, t in enumerate(tokens):
            want = t[:-1] if finish[i] == "stop" else t
            if ref.token_ids[i] != want:
                raise AssertionError(f"{ckpt}: batch_generate row {i} {ref.token_ids[i]} != {want}")
        if "stop" not in finish:
            raise AssertionError(f"{ckpt}: no row stopped at {stop}")
        alone = [_alone(model, p, m, stop) for p, m in zip(prompts, MAX_TOKENS)]
        _write(out_dir, ckpt, "greedy", dict(base, tokens=tokens, finish_reasons=finish,
                                             steps=steps, alone=alone,
                                             alone_equal=[a == t for a, t in zip(alone, tokens)]),
               rows)

        n_layers = len(model.layers)
        caches = [[RotatingKVCache(MAX_KV_SIZE) for _ in range(n_layers)] for _ in prompts]
        tokens, rows, finish, steps = _run(model, prompts, stop, caches=caches)
        _write(out_dir, ckpt, "rotating", dict(base, max_kv_size=MAX_KV_SIZE, tokens=tokens,
                                               finish_reasons=finish, steps=steps), rows)

        samplers = [make_sampler(**SAMPLER) if i in SAMPLED_ROWS else None
                    for i in range(len(prompts))]
        processors = [make_logits_processors(**PROCESSORS) if i == PENALTY_ROW else None
                      for i in range(len(prompts))]
        mx.random.seed(SEED)
        tokens, rows, finish, steps = _run(model, prompts, stop, samplers, processors)
        _write(out_dir, ckpt, "sampled", dict(
            base, seed=SEED, tokens=tokens, finish_reasons=finish, steps=steps,
            samplers=[SAMPLER if i in SAMPLED_ROWS else None for i in range(len(prompts))],
            processors=[PROCESSORS if i == PENALTY_ROW else None for i in range(len(prompts))]),
            rows)
