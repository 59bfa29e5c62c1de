"""ORPO on the tiny checkpoints: fixtures for train.TestORPOOracle (issue 18).

An implementation of the ORPO loss of Hong, Lee and Thorne (2024),
independent of mlxgo's: mlx_lm's own model (mlx_lm.utils.load_model) with LoRA
layers from mlx_lm's linear_to_lora_layers, each response read in its own
forward of [prompt | response] (no prefix sharing), the response's token
log-probabilities from mlx.nn.losses.cross_entropy (negated), and the loss
and its gradients w.r.t. every adapter from MLX's autodiff
(nn.value_and_grad) over plain ops:

  ℓ       = mean over the response's tokens of log p(token | everything before)
  logOR   = (ℓ_w − ℓ_l) − [log1mexp(ℓ_w) − log1mexp(ℓ_l)],
            log1mexp(x) = log1p(−exp(x)) for x < −ln 2, else log(−expm1(x))
            (Mächler's stable form, with MLX's log1p and expm1)
  L       = mean over the pairs of −ℓ_w + λ·logaddexp(0, −logOR)

mlx-lm-lora's "ORPO" is a different formula (research notes §2.2); this is
the paper's. Each case sets every adapter (all layers, rank 4, scale 10)
to seeded values, lora_b included, so that every adapter has a gradient,
and reads seeded pairs of token ids; in the "greedy" cases each chosen
response is the model's own greedy continuation of its prompt, so that
ℓ_w lies near 0, and each rejected response the greedy continuation
after the second most likely first token, so that ℓ_l lies near ℓ_w:
the odds terms and their gradients matter there. It writes, under out/:

  NAME.json                {"model", "lambda", "rank", "scale",
                            "pairs": [{"prompt", "chosen", "rejected"}],
                            "loss", "log_odds", "chosen_logp": [per pair],
                            "rejected_logp": [per pair]} (float32 values
                            as Python floats)
  NAME.adapters.safetensors the adapters (mlx_lm's adapter names)
  NAME.grads.safetensors    dL/d(each adapter), the same names

and for the bfloat16 checkpoints the same run with the weights in float32
(the reference that measures the bf16 run's own error, as models.py's
ref.*): "ref" in NAME.json (loss, log_odds, chosen_logp, rejected_logp)
and NAME.refgrads.safetensors.

These are not manifest cases: the Go test reads them directly.
"""

import math
import os
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import load_model

import common

LORA = {"rank": 4, "dropout": 0.0, "scale": 10.0}

# name, checkpoint, λ, greedy chosen, [(P, Rc, Rr)] per pair
CASES = [
    ("optiq-f32_lambda0", "optiq-f32", 0.0, False, [(9, 5, 7), (1, 1, 3)]),
    ("optiq-f32_lambda0.1", "optiq-f32", 0.1, False, [(9, 5, 7), (1, 1, 3), (4, 6, 1)]),
    ("optiq-f32_greedy_lambda1", "optiq-f32", 1.0, True, [(6, 4, 5), (3, 2, 2)]),
    # No greedy case in bf16: there, on these random checkpoints, MLX's own
    # bf16 gradients were as far from the float32 run's as their own size
    # (relative Frobenius error ~1), so nothing could be held to them.
    ("optiq-bf16_lambda0.1", "optiq-bf16", 0.1, False, [(6, 4, 5), (2, 3, 1)]),
    ("fp-f32_lambda0.5", "fp-f32", 0.5, False, [(5, 3, 4)]),
    ("q4g64-bf16_lambda0.1", "q4g64-bf16", 0.1, False, [(7, 2, 3), (2, 4, 2)]),
]


def log1mexp(x):
    return mx.where(x < -math.log(2.0), mx.log1p(-mx.exp(x)), mx.log(-mx.expm1(x)))


def response_logp(model, prompt, resp):
    """ℓ: the mean log-probability of resp's tokens after prompt, from one
    forward of [prompt | resp]."""
    ids = mx.array([prompt + resp])
    logits = model(ids)[0, len(prompt) - 1:len(prompt) + len(resp) - 1]
    lp = -nn.losses.cross_entropy(logits, mx.array(resp))
    return lp.astype(mx.float32).sum() / len(resp)


def greedy(model, prompt, n, second=False):
    """The model's greedy continuation of prompt (with second, its first
    token is the second most likely instead)."""
    ids = list(prompt)
    if second:
        ids.append(int(mx.argsort(model(mx.array([ids]))[0, -1])[-2].item()))
        n -= 1
    for _ in range(n):
        ids.append(int(mx.argmax(model(mx.array([ids]))[0, -1]).item()))
    return ids[len(prompt):]


def run(model, pairs, lam):
    """The ORPO loss over pairs, its mean logOR, each pair's ℓ_w and ℓ_l,
    and the gradients w.r.t. the adapters (name -> array)."""
    parts = {}

    def loss_fn(m):
        total, lors, lws, lls = 0.0, [], [], []
        for prompt, chosen, rejected in pairs:
            lw = response_logp(m, prompt, chosen)
            ll = response_logp(m, prompt, rejected)
            lor = (lw - ll) - (log1mexp(lw) - log1mexp(ll))
            total = total + (-lw + lam * mx.logaddexp(mx.array(0.0), -lor))
            lors.append(lor)
            lws.append(lw)
            lls.append(ll)
        parts["lor"], parts["lw"], parts["ll"] = lors, lws, lls
        return total / len(pairs)

    loss, grads = nn.value_and_grad(model, loss_fn)(model)
    mx.eval(loss, grads, parts)
    grads = dict(tree_flatten(grads))
    for k, g in grads.items():
        assert bool(mx.all(mx.isfinite(g)).item()), k
    log_odds = float(sum(float(x.item()) for x in parts["lor"]) / len(pairs))
    return float(loss.item()), log_odds, [float(x.item()) for x in parts["lw"]], [float(x.item()) for x in parts["ll"]], grads


def generate(out, models_dir):
    os.makedirs(out, exist_ok=True)
    mx.set_default_device(mx.cpu)
    for name, ckpt, lam, greedy_chosen, shapes in CASES:
        model, _ = load_model(Path(os.path.join(models_dir, ckpt)))
        model.freeze()
        linear_to_lora_layers(model, len(model.layers), LORA)
        rng = np.random.default_rng(sum(map(ord, name)))
        params = {}
        for k, v in tree_flatten(model.trainable_parameters()):
            params[k] = mx.array((rng.standard_normal(v.shape) * (0.3 if k.endswith("lora_a") else 0.05)).astype(np.float32))
        model.load_weights(list(params.items()), strict=False)
        vocab = model.args.vocab_size
        pairs = []
        for P, Rc, Rr in shapes:
            prompt = [int(x) for x in rng.integers(0, vocab, P)]
            chosen = greedy(model, prompt, Rc) if greedy_chosen else [int(x) for x in rng.integers(0, vocab, Rc)]
            rejected = greedy(model, prompt, Rr, second=True) if greedy_chosen else [int(x) for x in rng.integers(0, vocab, Rr)]
            pairs.append((prompt, chosen, rejected))

        loss, log_odds, lws, lls, grads = run(model, pairs, lam)
        assert set(grads) == set(params), name
        fixture = {
            "model": ckpt, "lambda": lam, "rank": LORA["rank"], "scale": LORA["scale"],
            "pairs": [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs],
            "loss": loss, "log_odds": log_odds, "chosen_logp": lws, "rejected_logp": lls,
        }
        if "bf16" in ckpt:
            # The same weights and adapters in float32: the reference that
            # measures the bf16 run's own error (as models.py's ref.*).
            model.set_dtype(mx.float32)
            rl, ro, rw, rr, rg = run(model, pairs, lam)
            fixture["ref"] = {"loss": rl, "log_odds": ro, "chosen_logp": rw, "rejected_logp": rr}
            common.write_safetensors(os.path.join(out, name + ".refgrads.safetensors"), rg, metadata={"format": "mlx"})
        common.write_safetensors(os.path.join(out, name + ".adapters.safetensors"), params, metadata={"format": "mlx"})
        common.write_safetensors(os.path.join(out, name + ".grads.safetensors"), grads, metadata={"format": "mlx"})
        common.write_json(os.path.join(out, name + ".json"), fixture)
