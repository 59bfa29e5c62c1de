"""Tap dumps: the named intermediates of one mlx_lm forward pass, for `mlxgo diff`.

Standalone:
    python conformance/oracle/taps.py --model DIR --prompt-ids 1,2,3 --out FILE.safetensors
Called by generate.py (`generate(models_dir)`): writes models/<ckpt>/taps.safetensors for every
fixture checkpoint, with the 7-token prompt of the hidden/len7 case.

The forward pass is mlx_lm's llama Model.__call__ written out op by op (the same modules, ops and
order as llama.py's TransformerBlock, Attention and MLP), one call without a cache and with
create_attention_mask(h, None), so every intermediate can be named. The script asserts that each
layer's output and the logits are bit-identical to calling the model's own layers and the model.
Tap names, shapes and the file format: conformance/README.md, section "Tap dumps".
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm.models.activations import swiglu  # noqa: E402
from mlx_lm.models.base import create_attention_mask, scaled_dot_product_attention  # noqa: E402

import common  # noqa: E402
import models  # noqa: E402

FORMAT = "mlxgo-taps"
PROMPT_SEED, PROMPT_LEN = 2007, 7  # the prompt of the hidden/len7 case
_ST_DTYPE = {mx.float32: "F32", mx.bfloat16: "BF16", mx.float16: "F16"}


def taps(model, ids):
    """Run ids (1-D int array) through model; return {tap name: mx.array} in graph order."""
    inner = model.model
    x = mx.array(np.asarray(ids, dtype=np.int32))[None]
    out = {}
    h = inner.embed_tokens(x)
    out["embed"] = h
    mask = create_attention_mask(h, None)
    for i, layer in enumerate(inner.layers):
        p = f"layers.{i}."
        attn, mlp = layer.self_attn, layer.mlp
        xn = layer.input_layernorm(h)
        B, L, _ = xn.shape
        q, k, v = attn.q_proj(xn), attn.k_proj(xn), attn.v_proj(xn)
        q = q.reshape(B, L, attn.n_heads, -1).transpose(0, 2, 1, 3)
        k = k.reshape(B, L, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
        v = v.reshape(B, L, attn.n_kv_heads, -1).transpose(0, 2, 1, 3)
        q, k = attn.rope(q), attn.rope(k)
        o = scaled_dot_product_attention(q, k, v, cache=None, scale=attn.scale, mask=mask)
        op = attn.o_proj(o.transpose(0, 2, 1, 3).reshape(B, L, -1))
        r = h + op
        rn = layer.post_attention_layernorm(r)
        gate, up = mlp.gate_proj(rn), mlp.up_proj(rn)
        s = swiglu(gate, up)
        down = mlp.down_proj(s)
        y = r + down
        for name, a in [("input_norm", xn), ("q", q), ("k", k), ("v", v), ("attn", o), ("o_proj", op),
                        ("residual", r), ("post_norm", rn), ("mlp.gate", gate), ("mlp.up", up),
                        ("mlp.swiglu", s), ("mlp.down", down), ("out", y)]:
            out[p + name] = a
        models._assert_same_bits(y, layer(h, mask, cache=None), f"taps: layer {i} output vs the layer itself")
        h = y
    norm = inner.norm(h)
    logits = inner.embed_tokens.as_linear(norm) if model.args.tie_word_embeddings else model.lm_head(norm)
    out["norm"], out["logits"] = norm, logits
    mx.eval(list(out.values()))
    models._assert_same_bits(logits, model(x), "taps: logits vs model(ids)")
    return out


def write(path, model, ids, checkpoint):
    """Write the taps of ids as a tap dump (safetensors; metadata as conformance/README.md says)."""
    t = taps(model, ids)
    v = common.versions()
    meta = {
        "format": FORMAT,
        "version": "1",
        "checkpoint": checkpoint,
        "prompt_ids": ",".join(str(int(i)) for i in ids),
        "backend": "mlx_lm",
        "precision": "",
        "device": "gpu" if mx.default_device() == mx.gpu else "cpu",
        "dtype": _ST_DTYPE[t["embed"].dtype],
        "producer": f"conformance/oracle/taps.py: mlx {v['mlx']}, mlx_lm {v['mlx_lm']}",
    }
    common.write_safetensors(path, t, meta)


def _load(path):
    """The model as mlx_lm.load returns it (through models._load_with_mlx_lm when the directory
    has no tokenizer, as the fixture checkpoints do not)."""
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        import mlx_lm

        return mlx_lm.load(path)[0]
    return models._load_with_mlx_lm(path)


def generate(models_dir):
    """One tap dump per fixture checkpoint: models_dir/<ckpt>/taps.safetensors."""
    mx.set_default_device(mx.cpu)
    ids = models._ids(PROMPT_SEED, PROMPT_LEN)
    written = []
    for ckpt in sorted(os.listdir(models_dir)):
        path = os.path.join(models_dir, ckpt)
        if not os.path.exists(os.path.join(path, "config.json")):
            continue
        out = os.path.join(path, "taps.safetensors")
        write(out, _load(path), ids, ckpt)
        written.append(out)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="MLX checkpoint directory")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    ap.add_argument("--out", required=True, help="output .safetensors file")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="MLX device (default cpu, as the fixtures)")
    args = ap.parse_args()
    try:
        ids = [int(s) for s in args.prompt_ids.split(",")]
    except ValueError:
        sys.exit(f"--prompt-ids {args.prompt_ids!r}: want comma-separated integers")
    if not ids or min(ids) < 0:
        sys.exit(f"--prompt-ids {args.prompt_ids!r}: want at least one non-negative id")
    mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
    model = _load(args.model)
    vocab = model.args.vocab_size
    if max(ids) >= vocab:
        sys.exit(f"--prompt-ids: id {max(ids)} >= vocab_size {vocab} of {args.model}")
    write(args.out, model, ids, os.path.basename(os.path.normpath(args.model)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
