"""Gradient fixtures: MLX's own mx.vjp and mx.value_and_grad (issue 17).

Each case differentiates one function written in the ops of mlxgo's backend
contract, exactly as the Go runner (conformance/grad.go) writes it, so that
the MLX backend, which hands the same function to MLX's autodiff, must give
the same bits. Inputs are seeded by the case name as in ops.py; the
cotangent "cot" is an input like the primals. Outputs: "y", the function's
value, and "d_<input>", the vector-Jacobian product of cot with respect to
that input (in the input's dtype). References: the same mx.vjp evaluated in
float64 on the inputs widened exactly (MLX's CPU device computes float64
throughout), except where a quantized weight is involved: there it is
dequantized exactly (ops._deq64) and the float64 function uses it as a dense
matrix.

Ops (the conformance schema lists their inputs and params):
  vjp_<op>         for rms_norm, rope, scaled_dot_product_attention, swiglu,
                   quantized_matmul (w.r.t. x), matmul, softmax, logsumexp,
                   take, unary (param fn), binary (param fn)
  value_and_grad   a next-token loss through the quantized head:
                   mean(logsumexp(logits) - logits[target]) of
                   logits = quantized_matmul(rms_norm(h, weight)), gradients
                   w.r.t. h and weight (param checkpoint: the norm and head
                   under mx.checkpoint); the scalar loss is stored with
                   shape [1] (common.write_safetensors widens 0-d arrays)
  value_and_grad_cross_entropy
                   mlx_lm's training loss (tuner/trainer.py default_loss)
                   on given logits, targets and mask, through
                   mlx.nn.losses.cross_entropy itself; gradient w.r.t. the
                   logits
"""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.activations import swiglu

from common import dtype_name, write_case
from ops import DTYPES, _case, _cast, _deq64, _f64, _matmul64, _rng, _shape, _stat

F64 = mx.float64


def _wide(a):
    return mx.array(_f64(a)).astype(F64) if a.dtype != mx.bool_ else a


def _vjp_case(entries, out_dir, name, op, dt, params, inputs, order, diff, fn, fn64=None):
    """Run mx.vjp of fn over the inputs named in diff (the others are
    passed as constants), with a seeded cotangent, and write the case.
    fn64 (default fn) computes the float64 reference from widened inputs."""
    r = _rng(name + "/cot")
    args = [inputs[k] for k in order]
    idx = [order.index(k) for k in diff]

    def call(f, xs):
        def g(*ps):
            full = list(xs)
            for i, p in zip(idx, ps):
                full[i] = p
            return f(*full)
        return g

    y = call(fn, args)(*[args[i] for i in idx])
    mx.eval(y)
    cot = _cast(r.standard_normal(y.shape), y.dtype)
    (y,), grads = mx.vjp(call(fn, args), [args[i] for i in idx], [cot])
    mx.eval(y, grads)
    wide = [_wide(a) if a.dtype in (mx.float32, mx.bfloat16, mx.float16) else a for a in args]
    (y64,), g64 = mx.vjp(call(fn64 or fn, wide), [wide[i] for i in idx], [_wide(cot)])
    mx.eval(y64, g64)
    outputs = {"y": y}
    refs = {"y": np.array(y64)}
    for k, g, gr in zip(diff, grads, g64):
        outputs["d_" + k] = g
        refs["d_" + k] = np.array(gr)
    ins = dict(inputs)
    ins["cot"] = cot
    _case(entries, out_dir, name, op, dtype_name(dt), params, ins, outputs, refs=refs,
          order=list(order) + ["cot"])


def _gen_fused(out_dir):
    entries = []
    for dn in ("f32", "bf16"):
        dt = DTYPES[dn]
        name = f"vjp/rms_norm/{dn}/3x5x64"
        r = _rng(name)
        x = _cast(r.standard_normal((3, 5, 64)) * 2.0, dt)
        w = _cast(1.0 + 0.1 * r.standard_normal(64), dt)
        _vjp_case(entries, out_dir, name, "vjp_rms_norm", dt, {"eps": 1e-5}, {"x": x, "weight": w},
                  ["x", "weight"], ["x", "weight"], lambda x, w: mx.fast.rms_norm(x, w, 1e-5))

        for trad, offset, dims in ((False, 7, 32), (True, 3, 32), (False, [9, 0], 16)):
            tag = f"{'trad' if trad else 'half'}/d{dims}/" + (f"rows{offset[0]}_{offset[1]}" if isinstance(offset, list) else f"off{offset}")
            name = f"vjp/rope/{tag}/{dn}/2x4x5x32"
            r = _rng(name)
            x = _cast(r.standard_normal((2, 4, 5, 32)), dt)
            inputs = {"x": x}
            order = ["x"]
            params = {"dims": dims, "traditional": trad, "base": 10000.0, "scale": 1.0}
            if isinstance(offset, list):
                off = mx.array(np.array(offset, dtype=np.int32))
                inputs["offset"] = off
                order.append("offset")
                params["offset_is_array"] = True

                def fn(x, o, dims=dims, trad=trad):
                    return mx.fast.rope(x, dims, traditional=trad, base=10000.0, scale=1.0, offset=o)
            else:
                params["offset"] = offset
                params["offset_is_array"] = False

                def fn(x, dims=dims, trad=trad, offset=offset):
                    return mx.fast.rope(x, dims, traditional=trad, base=10000.0, scale=1.0, offset=offset)
            _vjp_case(entries, out_dir, name, "vjp_rope", dt, params, inputs, order, ["x"], fn)

        for mk, h, hk, l, s in (("causal", 4, 2, 5, 5), ("causal", 4, 1, 3, 7), ("bool", 4, 2, 4, 6),
                                ("additive", 2, 2, 4, 6), ("none", 4, 2, 1, 6)):
            name = f"vjp/scaled_dot_product_attention/{mk}/h{h}k{hk}/{dn}/l{l}s{s}"
            r = _rng(name)
            hd = 16
            q = _cast(r.standard_normal((2, h, l, hd)), dt)
            k = _cast(r.standard_normal((2, hk, s, hd)), dt)
            v = _cast(r.standard_normal((2, hk, s, hd)), dt)
            scale = hd ** -0.5
            inputs = {"q": q, "k": k, "v": v}
            order = ["q", "k", "v"]
            params = {"scale": scale, "mask": {"none": None, "causal": "causal"}.get(mk, "array"), "mask_kind": mk}
            if mk == "bool":
                mb = r.random((2, 1, l, s)) < 0.7
                mb[..., np.arange(l), np.arange(l) + (s - l)] = True
                inputs["mask"] = mx.array(mb)
                params["mask_dtype"] = "bool"
            elif mk == "additive":
                ma = 0.5 * r.standard_normal((l, s))
                ma[r.random((l, s)) < 0.3] = -np.inf
                ma[np.arange(l), np.arange(l) + (s - l)] = 0.0
                inputs["mask"] = _cast(ma, dt)
                params["mask_dtype"] = dtype_name(dt)
            if "mask" in inputs:
                order.append("mask")

                def fn(q, k, v, m, scale=scale):
                    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)
            else:
                def fn(q, k, v, scale=scale, mk=mk):
                    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask="causal" if mk == "causal" else None)
            _vjp_case(entries, out_dir, name, "vjp_scaled_dot_product_attention", dt, params, inputs, order,
                      ["q", "k", "v"], fn)

        name = f"vjp/swiglu/{dn}/6x48"
        r = _rng(name)
        gate = _cast(r.standard_normal((6, 48)) * 2, dt)
        x = _cast(r.standard_normal((6, 48)), dt)
        _vjp_case(entries, out_dir, name, "vjp_swiglu", dt, {}, {"gate": gate, "x": x}, ["gate", "x"],
                  ["gate", "x"], swiglu, lambda g, x: nn.silu(g) * x)

        for tr in (True, False):
            name = f"vjp/quantized_matmul/b4g64/{'t' if tr else 'n'}/{dn}/5x128x64"
            r = _rng(name)
            k, n = 128, 64
            x = _cast(r.standard_normal((5, k)), dt)
            w = _cast(r.standard_normal((n, k) if tr else (k, n)) / np.sqrt(k), dt)
            wq, sc, bi = mx.quantize(w, group_size=64, bits=4)
            mx.eval(wq, sc, bi)
            deq = mx.array(_deq64(wq, sc, bi, 64, 4)).astype(F64)
            params = {"bits": 4, "group_size": 64, "transpose": tr, "mode": "affine"}
            _vjp_case(entries, out_dir, name, "vjp_quantized_matmul", dt, params,
                      {"x": x, "wq": wq, "scales": sc, "biases": bi}, ["x", "wq", "scales", "biases"], ["x"],
                      lambda x, wq, s, b, tr=tr: mx.quantized_matmul(x, wq, s, b, transpose=tr, group_size=64, bits=4),
                      lambda x, wq, s, b, tr=tr, deq=deq: x @ (deq.T if tr else deq))
    return entries


def _gen_dense(out_dir):
    entries = []
    for sa, sb in (((5, 12), (12, 7)), ((2, 3, 4, 8), (8, 6)), ((8,), (8, 3))):
        name = f"vjp/matmul/f32/{_shape(sa)}@{_shape(sb)}"
        r = _rng(name)
        a, b = _cast(r.standard_normal(sa), mx.float32), _cast(r.standard_normal(sb), mx.float32)
        _vjp_case(entries, out_dir, name, "vjp_matmul", mx.float32, {}, {"a": a, "b": b}, ["a", "b"], ["a", "b"],
                  mx.matmul)
    for dn in ("f32", "bf16"):
        dt = DTYPES[dn]
        name = f"vjp/softmax/{dn}/4x33"
        x = _cast(_rng(name).standard_normal((4, 33)) * 3, dt)
        _vjp_case(entries, out_dir, name, "vjp_softmax", dt, {"axis": -1, "precise": True}, {"x": x}, ["x"], ["x"],
                  lambda x: mx.softmax(x, axis=-1, precise=True))
        name = f"vjp/logsumexp/{dn}/4x33"
        x = _cast(_rng(name).standard_normal((4, 33)) * 3, dt)
        _vjp_case(entries, out_dir, name, "vjp_logsumexp", dt, {"axis": -1}, {"x": x}, ["x"], ["x"],
                  lambda x: mx.logsumexp(x, axis=-1))
    name = "vjp/take/f32/embedding"
    x = _cast(_rng(name).standard_normal((10, 16)), mx.float32)
    ids = mx.array(np.array([[3, 0, 9, 3], [3, 7, 0, 1]], dtype=np.int32))
    _vjp_case(entries, out_dir, name, "vjp_take", mx.float32, {"axis": 0}, {"x": x, "indices": ids},
              ["x", "indices"], ["x"], lambda x, i: mx.take(x, i, axis=0))
    for fn in ("exp", "log", "sigmoid", "silu", "tanh", "rsqrt", "square", "sin", "cos"):
        for dn in ("f32", "bf16"):
            dt = DTYPES[dn]
            name = f"vjp/unary/{fn}/{dn}/3x17"
            v = _rng(name).standard_normal((3, 17))
            if fn in ("log", "rsqrt"):
                v = 0.2 + np.abs(v)
            x = _cast(v, dt)
            f = nn.silu if fn == "silu" else getattr(mx, fn)
            _vjp_case(entries, out_dir, name, "vjp_unary", dt, {"fn": fn}, {"x": x}, ["x"], ["x"], f)
    for fn, sb in (("add", (17,)), ("subtract", (3, 1)), ("multiply", (3, 17)), ("divide", (17,)), ("maximum", (3, 17))):
        for dn in ("f32", "bf16"):
            dt = DTYPES[dn]
            name = f"vjp/binary/{fn}/{dn}/3x17,{_shape(sb)}"
            r = _rng(name)
            a = _cast(r.standard_normal((3, 17)), dt)
            bv = r.standard_normal(sb)
            if fn == "divide":
                bv = np.sign(bv) * (0.5 + np.abs(bv))
            b = _cast(bv, dt)
            _vjp_case(entries, out_dir, name, "vjp_binary", dt, {"fn": fn}, {"a": a, "b": b}, ["a", "b"], ["a", "b"],
                      getattr(mx, fn))
    return entries


def _loss(h, w, wq, s, b, targets, eps, gs, bits, checkpoint, deq=None):
    """The loss as conformance/grad.go's runner writes it, op for op."""
    def head(h, w):
        n = mx.fast.rms_norm(h, w, eps)
        if deq is not None:
            return n @ deq.T
        return mx.quantized_matmul(n, wq, s, b, transpose=True, group_size=gs, bits=bits)
    if checkpoint:
        head = mx.checkpoint(head)
    logits = head(h, w)
    t, v = logits.shape
    flat = targets + mx.arange(t, dtype=mx.int32) * v
    picked = mx.take(logits.reshape(-1), flat, axis=0)
    ce = mx.logsumexp(logits, axis=-1) - picked
    return mx.sum(ce, axis=0) / mx.array(t, dtype=ce.dtype)


def _gen_loss(out_dir):
    entries = []
    for dn in ("f32", "bf16"):
        for ck in (False, True):
            dt = DTYPES[dn]
            name = f"value_and_grad/cross_entropy/{'checkpoint' if ck else 'plain'}/b4g64/{dn}/t6d64v96"
            r = _rng(name)
            t, d, v = 6, 64, 96
            h = _cast(r.standard_normal((t, d)), dt)
            w = _cast(1.0 + 0.1 * r.standard_normal(d), dt)
            wq, s, b = mx.quantize(_cast(r.standard_normal((v, d)) / np.sqrt(d), dt), group_size=64, bits=4)
            targets = mx.array(r.integers(0, v, t).astype(np.int32))
            mx.eval(wq, s, b)
            params = {"eps": 1e-5, "bits": 4, "group_size": 64, "mode": "affine", "checkpoint": ck}
            f = mx.value_and_grad(lambda h, w: _loss(h, w, wq, s, b, targets, 1e-5, 64, 4, ck), argnums=[0, 1])
            loss, (dh, dw) = f(h, w)
            mx.eval(loss, dh, dw)
            deq = mx.array(_deq64(wq, s, b, 64, 4)).astype(F64)
            f64 = mx.value_and_grad(lambda h, w: _loss(h, w, None, None, None, targets, 1e-5, 64, 4, False, deq), argnums=[0, 1])
            loss64, (dh64, dw64) = f64(_wide(h), _wide(w))
            mx.eval(loss64, dh64, dw64)
            _case(entries, out_dir, name, "value_and_grad", dtype_name(dt), params,
                  {"h": h, "weight": w, "wq": wq, "scales": s, "biases": b, "targets": targets},
                  {"loss": loss.reshape(1), "d_h": dh, "d_weight": dw},
                  refs={"loss": np.array(loss64).reshape(1), "d_h": np.array(dh64), "d_weight": np.array(dw64)},
                  order=["h", "weight", "wq", "scales", "biases", "targets"])
    return entries


def _gen_cross_entropy(out_dir):
    """mlx_lm's training loss on given logits: tuner/trainer.py default_loss
    after the model, with mlx.nn.losses.cross_entropy itself (on the CPU
    device: logits minus their stop_gradient max, take_along_axis, logsumexp)."""
    entries = []
    for dn in ("f32", "bf16"):
        dt = DTYPES[dn]
        b, t, v = 2, 5, 40
        name = f"value_and_grad/cross_entropy_loss/{dn}/b{b}t{t}v{v}"
        r = _rng(name)
        logits = _cast(r.standard_normal((b, t, v)) * 3, dt)
        targets = mx.array(r.integers(0, v, (b, t)).astype(np.int32))
        mask = mx.array(np.array([[True] * 5, [False, True, True, True, False]]))

        def loss(logits, targets=targets, mask=mask):
            ce = nn.losses.cross_entropy(logits, targets) * mask
            return ce.astype(mx.float32).sum() / mask.sum()
        y, d = mx.value_and_grad(loss)(logits)
        mx.eval(y, d)
        y64, d64 = mx.value_and_grad(loss)(_wide(logits))
        mx.eval(y64, d64)
        _case(entries, out_dir, name, "value_and_grad_cross_entropy", dtype_name(dt), {},
              {"logits": logits, "targets": targets, "mask": mask},
              {"loss": y.reshape(1), "d_logits": d},
              refs={"loss": np.array(y64).reshape(1), "d_logits": np.array(d64)},
              order=["logits", "targets", "mask"])
    return entries


def _gen_lora(out_dir):
    """mlx_lm's LoRALinear over a Linear and a QuantizedLinear (QLoRA): the
    forward, mx.vjp w.r.t. x, lora_a and lora_b of the layer itself, and
    LoRALinear.fuse (re-quantized with the base's group size and bits)."""
    from mlx_lm.tuner.lora import LoRALinear

    entries = []
    for dn in ("f32", "bf16"):
        for quant in (False, True):
            dt = DTYPES[dn]
            n_in, n_out, rank, scale = 64, 48, 4, 20.0
            name = f"lora/{'quantized_linear/b4g32' if quant else 'linear'}/{dn}/r{rank}/3x{n_in}x{n_out}"
            r = _rng(name)
            x = _cast(r.standard_normal((3, n_in)), dt)
            w = _cast(r.standard_normal((n_out, n_in)) / np.sqrt(n_in), dt)
            base = nn.Linear(n_in, n_out, bias=False)
            base.weight = w
            inputs = {"x": x}
            order = ["x"]
            params = {"scale": scale, "rank": rank}
            if quant:
                base = nn.QuantizedLinear.from_linear(base, group_size=32, bits=4)
                mx.eval(base.parameters())
                inputs.update({"wq": base.weight, "scales": base.scales, "biases": base.biases})
                order += ["wq", "scales", "biases"]
                params.update({"bits": 4, "group_size": 32, "mode": "affine"})
            else:
                inputs["weight"] = w
                order.append("weight")
            layer = LoRALinear.from_base(base, r=rank, scale=scale)
            a = _cast(r.uniform(-1, 1, (n_in, rank)) / np.sqrt(n_in), mx.float32)
            b = _cast(r.standard_normal((rank, n_out)) * 0.1, mx.float32)
            inputs.update({"lora_a": a, "lora_b": b})
            order += ["lora_a", "lora_b"]

            def f(x, a, b, layer=layer):
                layer.lora_a, layer.lora_b = a, b
                return layer(x)
            y = f(x, a, b)
            mx.eval(y)
            cot = _cast(_rng(name + "/cot").standard_normal(y.shape), y.dtype)
            (y,), (dx, da, db) = mx.vjp(f, [x, a, b], [cot])
            layer.lora_a, layer.lora_b = a, b
            fused = layer.fuse(dequantize=False)
            mx.eval(y, dx, da, db, fused.parameters())
            outputs = {"y": y, "d_x": dx, "d_lora_a": da, "d_lora_b": db}
            if quant:
                outputs.update({"fused_wq": fused.weight, "fused_scales": fused.scales, "fused_biases": fused.biases})
            else:
                outputs["fused_weight"] = fused.weight
            inputs["cot"] = cot
            order.append("cot")
            # float64 references from the stored (rounded) inputs, the base
            # weight dequantized exactly
            w64 = _deq64(base.weight, base.scales, base.biases, 32, 4) if quant else _f64(w)
            x64, a64, b64, c64 = _f64(x), _f64(a), _f64(b), _f64(cot)
            refs = {
                "y": _matmul64(x64, w64.T) + scale * _matmul64(_matmul64(x64, a64), b64),
                "d_x": _matmul64(c64, w64) + scale * _matmul64(_matmul64(c64, b64.T), a64.T),
                "d_lora_a": scale * _matmul64(x64.T, _matmul64(c64, b64.T)),
                "d_lora_b": scale * _matmul64(_matmul64(x64, a64).T, c64),
            }
            if not quant:
                refs["fused_weight"] = w64 + scale * _matmul64(b64.T, a64.T)
            op = "lora_quantized_linear" if quant else "lora_linear"
            for k, ref in refs.items():
                _stat(name, op, dtype_name(dt), outputs[k], ref)
            tol = {k: "quantize" for k in ("fused_wq", "fused_scales", "fused_biases") if k in outputs}
            entries.append(write_case(out_dir, name, "op", op, dtype_name(dt), dict(params, input_order=order),
                                      inputs, outputs, op, references=refs,
                                      extra={"output_tolerance": tol} if tol else None))
    return entries


def _gen_dora(out_dir):
    """mlx_lm's DoRALinear over a Linear and a QuantizedLinear: m as
    from_base computes it, the forward, mx.vjp w.r.t. x, lora_a, lora_b and
    m, and fuse. References: the same layer in float64 over the exactly
    dequantized base weight."""
    from mlx_lm.tuner.dora import DoRALinear

    entries = []
    for dn in ("f32", "bf16"):
        for quant in (False, True):
            dt = DTYPES[dn]
            n_in, n_out, rank, scale = 64, 48, 4, 2.0
            name = f"dora/{'quantized_linear/b4g32' if quant else 'linear'}/{dn}/r{rank}/3x{n_in}x{n_out}"
            r = _rng(name)
            x = _cast(r.standard_normal((3, n_in)), dt)
            w = _cast(r.standard_normal((n_out, n_in)) / np.sqrt(n_in), dt)
            base = nn.Linear(n_in, n_out, bias=False)
            base.weight = w
            inputs = {"x": x}
            order = ["x"]
            params = {"scale": scale, "rank": rank}
            if quant:
                base = nn.QuantizedLinear.from_linear(base, group_size=32, bits=4)
                mx.eval(base.parameters())
                inputs.update({"wq": base.weight, "scales": base.scales, "biases": base.biases})
                order += ["wq", "scales", "biases"]
                params.update({"bits": 4, "group_size": 32, "mode": "affine"})
            else:
                inputs["weight"] = w
                order.append("weight")
            layer = DoRALinear.from_base(base, r=rank, scale=scale)
            m0 = layer.m
            a = _cast(r.uniform(-1, 1, (n_in, rank)) / np.sqrt(n_in), mx.float32)
            b = _cast(r.standard_normal((rank, n_out)) * 0.1, mx.float32)
            m = _cast(_f64(m0) * (1 + 0.1 * r.standard_normal(n_out)), mx.float32)
            inputs.update({"lora_a": a, "lora_b": b, "m": m})
            order += ["lora_a", "lora_b", "m"]

            def f(x, a, b, m, layer=layer):
                layer.lora_a, layer.lora_b, layer.m = a, b, m
                return layer(x)
            y = f(x, a, b, m)
            mx.eval(y)
            cot = _cast(_rng(name + "/cot").standard_normal(y.shape), y.dtype)
            (y,), (dx, da, db, dm) = mx.vjp(f, [x, a, b, m], [cot])
            layer.lora_a, layer.lora_b, layer.m = a, b, m
            fused = layer.fuse(dequantize=False)
            mx.eval(y, dx, da, db, dm, m0, fused.parameters())
            outputs = {"y": y, "d_x": dx, "d_lora_a": da, "d_lora_b": db, "d_m": dm, "m0": m0}
            if quant:
                outputs.update({"fused_wq": fused.weight, "fused_scales": fused.scales, "fused_biases": fused.biases})
            else:
                outputs["fused_weight"] = fused.weight
            inputs["cot"] = cot
            order.append("cot")
            # float64 references: the same layer over a float64 dense base
            w64 = mx.array(_deq64(base.weight, base.scales, base.biases, 32, 4) if quant else _f64(w))
            b64 = nn.Linear(n_in, n_out, bias=False)
            b64.weight = w64
            l64 = DoRALinear.from_base(b64, r=rank, scale=scale)
            refs = {"m0": np.array(l64.m)}

            def f64(x, a, b, m, layer=l64):
                layer.lora_a, layer.lora_b, layer.m = a, b, m
                return layer(x)
            (y64,), (dx64, da64, db64, dm64) = mx.vjp(f64, [_wide(x), _wide(a), _wide(b), _wide(m)], [_wide(cot)])
            refs.update({"y": np.array(y64), "d_x": np.array(dx64), "d_lora_a": np.array(da64),
                         "d_lora_b": np.array(db64), "d_m": np.array(dm64)})
            if not quant:
                l64.lora_a, l64.lora_b, l64.m = _wide(a), _wide(b), _wide(m)
                refs["fused_weight"] = np.array(l64.fuse().weight)
            op = "dora_quantized_linear" if quant else "dora_linear"
            for k, ref in refs.items():
                _stat(name, op, dtype_name(dt), outputs[k], ref)
            tol = {k: "quantize" for k in ("fused_wq", "fused_scales", "fused_biases") if k in outputs}
            entries.append(write_case(out_dir, name, "op", op, dtype_name(dt), dict(params, input_order=order),
                                      inputs, outputs, op, references=refs,
                                      extra={"output_tolerance": tol} if tol else None))
    return entries


def generate(out_dir):
    """Write every gradient case under out_dir; return their index entries."""
    mx.set_default_device(mx.cpu)
    entries = []
    for gen in (_gen_fused, _gen_dense, _gen_loss, _gen_cross_entropy, _gen_lora, _gen_dora):
        entries += gen(out_dir)
    names = [e["name"] for e in entries]
    if len(set(names)) != len(names):
        raise AssertionError("duplicate gradient case names")
    return entries
