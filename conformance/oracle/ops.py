"""Op-level conformance fixtures: one MLX op (or mlx_lm helper) per case.

Every case runs on MLX's CPU device. Inputs come from a numpy generator seeded
by the case name (so adding a case never shifts another), are cast to the case
dtype first, and are stored exactly as MLX saw them. Every float output of an op that rounds
also gets a float64 reference computed with numpy from the stored, already
rounded inputs, following the op's mathematical definition (quantized ops are
dequantized exactly from the stored packed ints, scales and biases); ops that
do not round (data movement, conversions, selections, sign changes) have none
and are held to MLX's bits.

The per-op parameter keys, array names and references are listed in
conformance/README.md ("Op fixtures").

`python conformance/oracle/ops.py` (no arguments) writes the fixtures into a
temporary directory and prints per-op sizes and the error MLX's output has
against the float64 reference, per op and dtype (the tolerance-budget table).
"""

import hashlib
import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.activations import swiglu
from mlx_lm.models.rope_utils import Llama3RoPE
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    categorical_sampling,
    make_logits_processors,
    make_sampler,
)

from common import dtype_name, write_case

DTYPES = {"f32": mx.float32, "bf16": mx.bfloat16, "f16": mx.float16}

# (op, dtype) -> list of (case name, max abs err, max rel err, max |ref|);
# filled while generating, printed by main().
STATS = []


# ----------------------------------------------------------------- helpers

def _seed(name):
    """Stable 64-bit seed from a case name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def _rng(name):
    return np.random.default_rng(_seed(name))


def _cast(a, dt):
    """numpy -> mx array of dtype dt, evaluated (the stored input)."""
    x = mx.array(np.asarray(a, dtype=np.float32)).astype(dt)
    mx.eval(x)
    return x


def _f64(a):
    """mx or numpy array -> float64 numpy (exact for every float dtype used here)."""
    if isinstance(a, mx.array):
        if a.dtype in (mx.bfloat16, mx.float16):
            a = a.astype(mx.float32)
        mx.eval(a)
        a = np.array(a)
    return np.asarray(a, dtype=np.float64)


def _shape(s):
    return "x".join(str(d) for d in s)


_ULP = {mx.float32: (23, -126), mx.bfloat16: (7, -126), mx.float16: (10, -14)}


def _stat(name, op, dt, out, ref):
    """Record the error of MLX's output `out` against the float64 `ref`:
    max abs error, max error in ulps of the output dtype at the reference
    value, and max relative error (denominator floored at 1e-3 * max|ref|),
    over the elements where both are finite; and the count of the others
    where they differ (a finite reference that overflowed, for instance)."""
    mant, emin = _ULP[out.dtype]
    o = _f64(out)
    r = np.asarray(ref, dtype=np.float64)
    if o.shape != r.shape:
        raise AssertionError(f"{name}: output shape {o.shape} != reference shape {r.shape}")
    # elements where either side is not finite (overflow to ±Inf, NaN) are
    # counted apart, not measured: only a differing pair counts
    fin = np.isfinite(r) & np.isfinite(o)
    same = (o == r) | (np.isnan(o) & np.isnan(r))
    inf_mismatch = int(np.sum(~fin & ~same))
    if not fin.any():
        STATS.append((op, dt, name, 0.0, 0.0, 0.0, inf_mismatch))
        return
    o, r = o[fin], r[fin]
    d = np.abs(o - r)
    mag = np.abs(r)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    e = np.where(mag > 0, np.maximum(e, emin), emin)
    ulps = d / np.exp2(e - mant)
    rel = d / np.maximum(mag, max(mag.max() * 1e-3, 1e-30))
    STATS.append((op, dt, name, float(d.max()), float(ulps.max()), float(rel.max()), inf_mismatch))


def _case(entries, out_dir, name, op, dt, params, inputs, outputs, refs=None, order=None):
    """Write one op case, record its stats, append its index entry."""
    params = dict(params)
    params["input_order"] = list(order) if order else list(inputs)
    for k, r in (refs or {}).items():
        _stat(name, op, dt, outputs[k], r)
    entries.append(
        write_case(out_dir, name, "op", op, dt, params, inputs, outputs, op, references=refs)
    )


def _unpack(wq, bits, n):
    """Packed uint32 rows -> integer codes: each row is an LSB-first bitstream."""
    w = np.ascontiguousarray(np.array(wq).astype("<u4"))
    by = w.view(np.uint8).reshape(w.shape[:-1] + (w.shape[-1] * 4,))
    bt = np.unpackbits(by, axis=-1, bitorder="little")
    bt = bt[..., : n * bits].reshape(w.shape[:-1] + (n, bits)).astype(np.int64)
    return (bt << np.arange(bits, dtype=np.int64)).sum(-1)


def _deq64(wq, scales, biases, gs, bits):
    """Exact float64 dequantization of stored packed codes, scales and biases."""
    s = _f64(scales)
    b = _f64(biases)
    n = s.shape[-1] * gs
    q = _unpack(wq, bits, n).astype(np.float64)
    return q * np.repeat(s, gs, axis=-1) + np.repeat(b, gs, axis=-1)


def _quant_ref(w64, gs, bits):
    """float64 version of MLX's affine scale/bias computation (mlx/backend/cpu/quantized.cpp, quantize)."""
    n = 2**bits - 1
    g = w64.reshape(w64.shape[:-1] + (-1, gs))
    wmax = g.max(-1)
    wmin = g.min(-1)
    s = np.maximum((wmax - wmin) / n, 1e-7)
    side = np.abs(wmin) > np.abs(wmax)
    s = np.where(side, s, -s)
    edge = np.where(side, wmin, wmax)
    q0 = np.rint(edge / s)
    nz = q0 != 0
    s = np.where(nz, edge / np.where(nz, q0, 1), s)
    bias = np.where(nz, edge, 0.0)
    return s, bias


def _libm(f, special):
    """Elementwise float64 f from Python's math module (the C library's
    scalar functions), so references do not depend on which SIMD code numpy
    dispatches to on the machine; `special` (numpy) gives the values math
    refuses (overflow, poles, NaN results)."""
    def one(v):
        try:
            return f(v)
        except (OverflowError, ValueError):
            return float(special(np.float64(v)))

    def elementwise(x):
        with np.errstate(all="ignore"):
            return np.vectorize(one, otypes=[np.float64])(x)
    return elementwise


_exp = _libm(math.exp, np.exp)
_log = _libm(math.log, np.log)
_cos = _libm(math.cos, np.cos)
_sin = _libm(math.sin, np.sin)


def _matmul64(a, b):
    """a @ b (float64, numpy broadcasting) with every dot product summed by
    math.fsum over correctly rounded products: the same on every machine
    (numpy's BLAS sums in an order that depends on the CPU), and the exact
    result rounded once when both operands hold float32 values."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(*batch, a.shape[-2], b.shape[-1]):
        *bi, i, j = idx
        out[idx] = math.fsum(a[tuple(bi) + (i,)] * b[tuple(bi) + (slice(None), j)])
    return out


def _softmax64(x, axis=-1):
    m = np.max(np.where(np.isfinite(x), x, -np.inf), axis=axis, keepdims=True)
    e = _exp(x - m)
    return e / e.sum(axis=axis, keepdims=True)


# ----------------------------------------------------------------- quantization

def _quant_input(name, shape, dt, edge=False):
    r = _rng(name)
    if not edge:
        return _cast(r.standard_normal(shape) * 0.05, dt)
    rows, cols = shape
    a = np.zeros(shape)
    kinds = [
        lambda: -r.uniform(0.1, 2.0, cols),           # all negative
        lambda: np.full(cols, 0.3),                   # constant positive
        lambda: np.full(cols, -0.7),                  # constant negative
        lambda: np.zeros(cols),                       # all zero
        lambda: r.uniform(0.1, 2.0, cols),            # all positive
        lambda: r.standard_normal(cols) * 1e-9,       # range below eps*n: scale floor
        lambda: r.choice([-1.0, 1.0], cols),          # |min| == |max|
    ]
    for i in range(rows):
        a[i] = kinds[i % len(kinds)]()
    return _cast(a, dt)


def _gen_quant(out_dir):
    entries = []
    configs = []
    for bits in (2, 3, 4, 5, 6, 8):
        for gs in (32, 64, 128):
            for dn in ("f32", "bf16", "f16"):
                configs.append((bits, gs, dn, (7, 128), False))
        for dn in ("f32", "bf16", "f16"):
            configs.append((bits, 64, dn, (7, 128), True))
    for bits, gs in ((4, 32), (4, 128), (8, 32), (8, 128)):
        configs.append((bits, gs, "bf16", (7, 128), True))
    # one MiniCPM5-1B-sized row block (hidden 1536)
    for bits, dn in ((4, "f32"), (4, "bf16"), (8, "bf16")):
        configs.append((bits, 64, dn, (4, 1536), False))
    for bits, gs, dn, shape, edge in configs:
        dt = DTYPES[dn]
        tag = f"b{bits}/g{gs}/{dn}/{_shape(shape)}" + ("/edge" if edge else "")
        qname = "quantize/" + tag
        w = _quant_input(qname, shape, dt, edge)
        wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
        mx.eval(wq, s, b)
        rs, rb = _quant_ref(_f64(w), gs, bits)
        params = {"bits": bits, "group_size": gs, "mode": "affine"}
        _case(entries, out_dir, qname, "quantize", dtype_name(dt), params,
              {"w": w}, {"wq": wq, "scales": s, "biases": b},
              refs={"scales": rs, "biases": rb})
        # dequantize exactly the quantize outputs above
        dq = mx.dequantize(wq, s, b, group_size=gs, bits=bits)
        mx.eval(dq)
        ref = _deq64(wq, s, b, gs, bits)
        _case(entries, out_dir, "dequantize/" + tag, "dequantize", dtype_name(dt), params,
              {"wq": wq, "scales": s, "biases": b}, {"w": dq}, refs={"w": ref},
              order=["wq", "scales", "biases"])
    return entries


def _gen_qmm(out_dir):
    entries = []
    configs = []  # bits, gs, transpose, dtype, M, K, N
    for bits in (4, 8):
        for tr in (True, False):
            for dn in ("f32", "bf16"):
                for m in (1, 7):
                    configs.append((bits, 64, tr, dn, m, 256, 128))
                configs.append((bits, 64, tr, dn, 33, 256, 64))
    for bits, gs in ((2, 32), (3, 64), (5, 128), (6, 64)):
        for dn in ("f32", "bf16"):
            configs.append((bits, gs, True, dn, 7, 256, 128))
        configs.append((bits, gs, False, "bf16", 5, 128, 256))
    configs.append((4, 64, True, "f16", 7, 256, 128))
    configs.append((8, 64, False, "f16", 7, 256, 128))
    # every bits x group x dtype mlx_lm writes, as the graph calls it (transposed):
    # one decode row (the matvec kernels) and nine prefill rows (the GEMM kernels)
    for bits in (2, 3, 4, 5, 6, 8):
        for gs in (32, 64, 128):
            for dn in ("f32", "bf16", "f16"):
                for m, n in ((1, 40), (9, 24)):
                    configs.append((bits, gs, True, dn, m, 256, n))
    # MiniCPM5-1B-sized reductions: K = hidden 1536 (decode, M = 1) and K = MLP 4608
    configs.append((4, 64, True, "bf16", 1, 1536, 256))
    configs.append((8, 64, True, "bf16", 1, 1536, 64))
    configs.append((4, 64, True, "f32", 1, 1536, 64))
    configs.append((4, 64, True, "bf16", 3, 1536, 64))
    configs.append((4, 64, True, "bf16", 1, 4608, 32))
    for bits, gs, tr, dn, m, k, n in configs:
        dt = DTYPES[dn]
        name = f"quantized_matmul/b{bits}g{gs}/{'t' if tr else 'n'}/{dn}/{m}x{k}x{n}"
        r = _rng(name)
        x = _cast(r.standard_normal((m, k)), dt)
        wshape = (n, k) if tr else (k, n)
        w = _cast(r.standard_normal(wshape) / math.sqrt(k), dt)
        wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
        mx.eval(wq, s, b)
        y = mx.quantized_matmul(x, wq, s, b, transpose=tr, group_size=gs, bits=bits)
        mx.eval(y)
        wd = _deq64(wq, s, b, gs, bits)
        ref = _matmul64(_f64(x), wd.T if tr else wd)
        params = {"bits": bits, "group_size": gs, "transpose": tr, "mode": "affine"}
        _case(entries, out_dir, name, "quantized_matmul", dtype_name(dt), params,
              {"x": x, "wq": wq, "scales": s, "biases": b}, {"y": y}, refs={"y": ref},
              order=["x", "wq", "scales", "biases"])
    return entries


def _gen_embedding(out_dir):
    entries = []
    for bits, gs, dn in ((4, 64, "bf16"), (8, 32, "bf16")):
        dt = DTYPES[dn]
        name = f"quantized_embedding/b{bits}g{gs}/{dn}/1000x128/ids9"
        r = _rng(name)
        table = _cast(r.standard_normal((1000, 128)) * 0.05, dt)
        emb = nn.Embedding(1000, 128)
        emb.weight = table
        qe = nn.QuantizedEmbedding.from_embedding(emb, group_size=gs, bits=bits)
        ids = mx.array(np.array([5, 0, 999, 5, 123, 77, 999, 1, 500], dtype=np.int32))
        y = qe(ids)
        mx.eval(y, qe.weight, qe.scales, qe.biases)
        ref = _deq64(np.array(qe.weight)[np.array(ids)], np.array(qe.scales.astype(mx.float32))[np.array(ids)],
                     np.array(qe.biases.astype(mx.float32))[np.array(ids)], gs, bits)
        params = {"bits": bits, "group_size": gs, "mode": "affine"}
        _case(entries, out_dir, name, "quantized_embedding", dtype_name(dt), params,
              {"ids": ids, "weight": qe.weight, "scales": qe.scales, "biases": qe.biases},
              {"y": y}, refs={"y": ref}, order=["ids", "weight", "scales", "biases"])
    return entries


# ----------------------------------------------------------------- dense ops

def _matmul_case(entries, out_dir, name, dt, sa, sb):
    """One mx.matmul case of seeded normal operands of shapes sa and sb."""
    r = _rng(name)
    a = _cast(r.standard_normal(sa), dt)
    b = _cast(r.standard_normal(sb), dt)
    y = mx.matmul(a, b)
    mx.eval(y)
    _case(entries, out_dir, name, "matmul", dtype_name(dt), {},
          {"a": a, "b": b}, {"y": y}, refs={"y": _matmul64(_f64(a), _f64(b))}, order=["a", "b"])


def _gen_matmul(out_dir):
    entries = []
    for dn in ("f32", "bf16", "f16"):
        dt = DTYPES[dn]
        for sa, sb in (((7, 33), (33, 65)), ((2, 3, 5, 16), (2, 3, 16, 9))):
            name = f"matmul/{dn}/{_shape(sa)}@{_shape(sb)}"
            _matmul_case(entries, out_dir, name, dt, sa, sb)
    return entries


def _gen_rms_norm(out_dir):
    entries = []
    configs = []
    for dn in ("f32", "bf16", "f16"):
        for shape in ((1, 1536), (7, 1536), (3, 129)) if dn != "f16" else ((1, 1536), (3, 129)):
            configs.append((dn, shape, 1e-5))
        for shape in ((1, 1536), (3, 129)):
            configs.append((dn, shape, 1e-6))
    for dn, shape, eps in configs:
        dt = DTYPES[dn]
        name = f"rms_norm/eps{eps:g}/{dn}/{_shape(shape)}"
        r = _rng(name)
        x = _cast(r.standard_normal(shape) * 2.0, dt)
        w = _cast(1.0 + 0.1 * r.standard_normal(shape[-1]), dt)
        y = mx.fast.rms_norm(x, w, eps)
        mx.eval(y)
        x64 = _f64(x)
        ref = _f64(w) * x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
        _case(entries, out_dir, name, "rms_norm", dtype_name(dt), {"eps": eps},
              {"x": x, "weight": w}, {"y": y}, refs={"y": ref}, order=["x", "weight"])
    return entries


def _llama3_freqs(dims):
    cfg = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    f = Llama3RoPE(dims, max_position_embeddings=131072, traditional=False,
                   base=500000.0, scaling_config=cfg)._freqs
    mx.eval(f)
    return f


def _rope_ref(x64, dims, traditional, base, scale, offsets, freqs64):
    b, h, l, hd = x64.shape
    half = dims // 2
    if freqs64 is not None:
        inv = 1.0 / freqs64
    else:
        inv = np.array([base ** (-2.0 * i / dims) for i in range(half)])  # libm pow
    off = np.broadcast_to(np.asarray(offsets, dtype=np.float64).reshape(-1), (b,))
    pos = scale * (np.arange(l)[None, :] + off[:, None])          # [B, L]
    th = pos[:, None, :, None] * inv[None, None, None, :]         # [B, 1, L, half]
    c, s = _cos(th), _sin(th)
    y = x64.copy()
    if traditional:
        x1, x2 = x64[..., 0:dims:2], x64[..., 1:dims:2]
        y[..., 0:dims:2] = x1 * c - x2 * s
        y[..., 1:dims:2] = x1 * s + x2 * c
    else:
        x1, x2 = x64[..., :half], x64[..., half:dims]
        y[..., :half] = x1 * c - x2 * s
        y[..., half:dims] = x1 * s + x2 * c
    return y


def _gen_rope(out_dir):
    entries = []
    # (dtype, shape, dims, traditional, base, scale, offset, freqs)
    # offset: int (scalar) or list (per-row int32 array); freqs: None or "llama3"
    configs = []
    for dn in ("f32", "bf16"):
        for trad in (False, True):
            for off in (0, 37):
                configs.append((dn, (1, 2, 7, 128), 128, trad, 10000.0, 1.0, off, None))
            configs.append((dn, (2, 2, 5, 32), 32, trad, 10000.0, 1.0, 37, None))
            configs.append((dn, (2, 2, 5, 32), 16, trad, 10000.0, 1.0, 37, None))
        configs.append((dn, (1, 2, 7, 128), 128, False, 1000000.0, 1.0, 37, None))
        configs.append((dn, (1, 2, 7, 128), 128, False, 10000.0, 0.25, 37, None))
        configs.append((dn, (3, 2, 5, 128), 128, False, 10000.0, 1.0, [0, 37, 40000], None))
        configs.append((dn, (3, 2, 4, 32), 32, True, 10000.0, 1.0, [-3, 0, 1000], None))
        configs.append((dn, (1, 2, 7, 128), 128, False, None, 1.0, 37, "llama3"))
        configs.append((dn, (3, 2, 5, 128), 128, False, None, 1.0, [0, 9000, 100], "llama3"))
    configs.append(("bf16", (1, 16, 7, 128), 128, False, 1000000.0, 1.0, 0, None))
    configs.append(("bf16", (1, 16, 1, 128), 128, False, 1000000.0, 1.0, 1000, None))
    for dn, shape, dims, trad, base, scale, off, fr in configs:
        dt = DTYPES[dn]
        arr = isinstance(off, list)
        offtag = ("o" + ",".join(str(o) for o in off)) if arr else f"o{off}"
        basetag = "llama3freqs" if fr else f"base{base:g}"
        name = (f"rope/d{dims}/{'trad' if trad else 'std'}/{basetag}/scale{scale:g}/"
                f"{offtag}/{dn}/{_shape(shape)}")
        r = _rng(name)
        x = _cast(r.standard_normal(shape), dt)
        inputs = {"x": x}
        offset = mx.array(np.array(off, dtype=np.int32)) if arr else off
        if arr:
            inputs["offset"] = offset
        freqs = None
        if fr:
            freqs = _llama3_freqs(dims)
            inputs["freqs"] = freqs
        y = mx.fast.rope(x, dims, traditional=trad, base=None if fr else base,
                         scale=scale, offset=offset, freqs=freqs)
        mx.eval(y)
        ref = _rope_ref(_f64(x), dims, trad, base, scale, off, None if freqs is None else _f64(freqs))
        params = {"dims": dims, "traditional": trad, "base": None if fr else base,
                  "scale": scale, "offset": off, "offset_is_array": arr,
                  "freqs": "llama3" if fr else None}
        if fr:
            params["llama3"] = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192, "base": 500000.0}
        _case(entries, out_dir, name, "rope", dtype_name(dt), params, inputs, {"y": y},
              refs={"y": ref})
    return entries


def _sdpa_ref(q, k, v, scale, mask_kind, mask):
    b, h, l, d = q.shape
    hk, s = k.shape[1], k.shape[2]
    rep = h // hk
    kk = np.repeat(k, rep, axis=1)
    vv = np.repeat(v, rep, axis=1)
    sc = scale * _matmul64(q, np.swapaxes(kk, -1, -2))
    if mask_kind == "causal":
        i = np.arange(l)[:, None]
        j = np.arange(s)[None, :]
        sc = np.where(j <= i + (s - l), sc, -np.inf)
    elif mask_kind == "bool":
        sc = np.where(mask, sc, -np.inf)
    elif mask_kind == "additive":
        sc = sc + mask
    return _matmul64(_softmax64(sc), vv)


def _gen_sdpa(out_dir):
    entries = []
    # (dtype, B, H, Hk, L, S, hd, mask kind)
    configs = []
    for dn in ("f32", "bf16"):
        configs += [
            (dn, 1, 16, 2, 7, 7, 32, "causal"),
            (dn, 1, 16, 2, 5, 12, 32, "causal"),
            (dn, 1, 4, 4, 9, 9, 32, "causal"),
            (dn, 2, 16, 2, 5, 11, 32, "bool"),
            (dn, 1, 4, 4, 6, 10, 32, "additive"),
            (dn, 1, 16, 2, 1, 13, 32, "none"),
            (dn, 1, 4, 4, 1, 13, 32, "none"),
        ]
    configs += [
        ("bf16", 1, 16, 2, 7, 7, 128, "causal"),
        ("f32", 1, 16, 2, 1, 17, 128, "none"),
        ("bf16", 1, 16, 2, 1, 1031, 32, "none"),
        ("f32", 1, 8, 1, 1, 1031, 32, "none"),
        ("bf16", 1, 8, 1, 3, 1027, 32, "causal"),
    ]
    for dn, b, h, hk, l, s, hd, mk in configs:
        dt = DTYPES[dn]
        name = (f"scaled_dot_product_attention/{mk}/h{h}k{hk}/hd{hd}/{dn}/"
                f"b{b}l{l}s{s}")
        r = _rng(name)
        q = _cast(r.standard_normal((b, h, l, hd)), dt)
        k = _cast(r.standard_normal((b, hk, s, hd)), dt)
        v = _cast(r.standard_normal((b, hk, s, hd)), dt)
        scale = hd ** -0.5
        inputs = {"q": q, "k": k, "v": v}
        mask = None
        mref = None
        if mk == "causal":
            mask = "causal"
        elif mk == "bool":
            mb = r.random((b, 1, l, s)) < 0.7
            mb[..., np.arange(l), np.arange(l) + (s - l)] = True  # no fully masked row
            mask = mx.array(mb)
            inputs["mask"] = mask
            mref = mb
        elif mk == "additive":
            ma = 0.5 * r.standard_normal((l, s))
            ma[r.random((l, s)) < 0.3] = -np.inf
            ma[np.arange(l), np.arange(l) + (s - l)] = 0.0
            mask = _cast(ma, dt)
            inputs["mask"] = mask
            mref = _f64(mask)
        y = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        mx.eval(y)
        ref = _sdpa_ref(_f64(q), _f64(k), _f64(v), scale, mk, mref)
        params = {"scale": scale, "mask": {"none": None, "causal": "causal"}.get(mk, "array"),
                  "mask_kind": mk}
        if mk in ("bool", "additive"):
            params["mask_dtype"] = "bool" if mk == "bool" else dtype_name(dt)
        _case(entries, out_dir, name, "scaled_dot_product_attention", dtype_name(dt), params,
              inputs, {"y": y}, refs={"y": ref})
    return entries


def _gen_elementwise(out_dir):
    entries = []
    for dn in ("f32", "bf16"):
        dt = DTYPES[dn]
        for shape in ((7, 384), (1, 4608)):
            for precise in (True, False):
                name = f"softmax/{'precise' if precise else 'fast'}/{dn}/{_shape(shape)}"
                x = _cast(_rng(name).standard_normal(shape) * 3.0, dt)
                y = mx.softmax(x, axis=-1, precise=precise)
                mx.eval(y)
                _case(entries, out_dir, name, "softmax", dtype_name(dt),
                      {"axis": -1, "precise": precise}, {"x": x}, {"y": y},
                      refs={"y": _softmax64(_f64(x))})
            name = f"silu/{dn}/{_shape(shape)}"
            x = _cast(_rng(name).standard_normal(shape) * 4.0, dt)
            y = nn.silu(x)
            mx.eval(y)
            x64 = _f64(x)
            _case(entries, out_dir, name, "silu", dtype_name(dt), {}, {"x": x}, {"y": y},
                  refs={"y": x64 / (1.0 + _exp(-x64))})
            name = f"swiglu/{dn}/{_shape(shape)}"
            r = _rng(name)
            g = _cast(r.standard_normal(shape) * 4.0, dt)
            u = _cast(r.standard_normal(shape) * 2.0, dt)
            y = swiglu(g, u)
            mx.eval(y)
            g64 = _f64(g)
            _case(entries, out_dir, name, "swiglu", dtype_name(dt), {}, {"gate": g, "x": u},
                  {"y": y}, refs={"y": g64 / (1.0 + _exp(-g64)) * _f64(u)}, order=["gate", "x"])
    return entries


def _gen_reductions(out_dir):
    entries = []
    for dn in ("f32", "bf16"):
        dt = DTYPES[dn]
        for shape in ((7, 384), (1, 4608)):
            for op in ("sum", "max"):
                name = f"{op}/axis-1/{dn}/{_shape(shape)}"
                x = _cast(_rng(name).standard_normal(shape) + 0.5, dt)
                y = getattr(mx, op)(x, axis=-1)
                mx.eval(y)
                ref = getattr(np, op)(_f64(x), axis=-1)
                _case(entries, out_dir, name, op, dtype_name(dt), {"axis": -1, "keepdims": False},
                      {"x": x}, {"y": y}, refs={"y": ref})
        # logsumexp as generate_step uses it: over all axes of [1, V], keepdims
        for v, with_lp in ((1000, True), (130560, False)) if dn == "bf16" else ((1000, True),):
            name = f"logsumexp/all/{dn}/1x{v}"
            x = _cast(_rng(name).standard_normal((1, v)) * 3.0, dt)
            lse = mx.logsumexp(x, keepdims=True)
            outs = {"lse": lse}
            x64 = _f64(x)
            m = x64.max()
            lse64 = m + _log(_exp(x64 - m).sum(keepdims=True))
            refs = {"lse": lse64}
            if with_lp:
                outs["logprobs"] = x - lse
                refs["logprobs"] = x64 - lse64
            mx.eval(outs)
            _case(entries, out_dir, name, "logsumexp", dtype_name(dt),
                  {"axis": None, "keepdims": True,
                   "outputs_doc": "lse = logsumexp(x); logprobs = x - lse (in the input dtype)"},
                  {"x": x}, outs, refs=refs)
        # argmax along the last axis
        name = f"argmax/axis-1/{dn}/4x1000"
        x = _cast(_rng(name).standard_normal((4, 1000)) * 3.0, dt)
        y = mx.argmax(x, axis=-1)
        mx.eval(y)
        want = np.argmax(_f64(x), axis=-1)
        if not np.array_equal(np.array(y), want):
            raise AssertionError(f"{name}: MLX argmax {np.array(y)} != numpy {want}")
        _case(entries, out_dir, name, "argmax", dtype_name(dt), {"axis": -1}, {"x": x}, {"y": y})
    # exact ties (values on a coarse grid): the smallest index must win
    for dn in ("bf16", "f32"):
        dt = DTYPES[dn]
        name = f"argmax/ties/{dn}/5x1000"
        r = _rng(name)
        a = np.round(r.standard_normal((5, 1000)) * 4.0) / 8.0   # multiples of 1/8: many ties
        a[2, :] = 1.0                                             # all equal -> index 0
        a[3, [17, 500, 999]] = 100.0                              # three-way tie at the top
        a[4] = 10.0 + r.random(1000) * 0.03                       # distinct in f32, ties in bf16
        x = _cast(a, dt)
        y = mx.argmax(x, axis=-1)
        mx.eval(y)
        want = np.argmax(_f64(x), axis=-1)   # numpy: first occurrence
        if not np.array_equal(np.array(y), want):
            raise AssertionError(f"{name}: MLX argmax {np.array(y)} != first-max {want}")
        _case(entries, out_dir, name, "argmax", dtype_name(dt), {"axis": -1}, {"x": x}, {"y": y})
    return entries


# ----------------------------------------------------------------- elementwise, shaping, fill

# Edge values per float dtype: NaN, ±Inf, ±0, subnormals, the smallest normal,
# the largest finite, and ordinary values. Every one is exactly representable
# in its dtype (subnormals included), so the stored input is the listed value.
_EDGE = {
    "f32": [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, -3e-42, 1.1754944e-38,
            3.4e38, -3.4e38, 1.0, -1.0, 0.5, 2.5, 88.8, -104.0, 1e-20, 7.0],
    "bf16": [math.nan, math.inf, -math.inf, 0.0, -0.0, 9.2e-41, -1e-39, 1.1754944e-38,
             3.38e38, -3.38e38, 1.0, -1.0, 0.5, 2.5, 88.8, -104.0, 1e-20, 7.0],
    "f16": [math.nan, math.inf, -math.inf, 0.0, -0.0, 6e-8, -3e-5, 6.1035156e-5,
            65504.0, -65504.0, 1.0, -1.0, 0.5, 2.5, 11.1, -17.5, 1e-3, 7.0],
}
# The pairs of a binary edge case: the first ten edge values against each other.
_EDGE_PAIRS = 10


def _edge(dn, exact):
    """The edge values of dn for an op. MLX's float16 NaN bits depend on the
    platform (x86's portable type writes sign|0x7D00, ARM's native one
    0x7E00), so ops whose float16 output is held bit for bit (exact ops, and
    conversions to float16) get no float16 NaN; the others compare NaN as NaN."""
    e = _EDGE[dn]
    return [v for v in e if not math.isnan(v)] if exact and dn == "f16" else e


def _view(x, steps):
    """Apply a runner-side view (params.views[name]) to x as MLX indexing does."""
    for st in steps:
        if "transpose" in st:
            x = mx.transpose(x, st["transpose"])
        else:
            start, stop = st["slice"]
            x = x[tuple(slice(a, b) for a, b in zip(start, stop))]
    return x


def _quiet(fn, *xs):
    """fn(*xs) without numpy's warnings (edge values overflow and divide by zero)."""
    with np.errstate(all="ignore"):
        return fn(*xs)


_BINARY_REF = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
}
_BINARY_EXACT = {"maximum", "minimum", "equal", "less", "greater"}
_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "equal", "less", "greater"]


def _binary_case(entries, out_dir, name, op, a, b, views=None):
    va, vb = _view(a, (views or {}).get("a", [])), _view(b, (views or {}).get("b", []))
    y = getattr(mx, op)(va, vb)
    mx.eval(y)
    refs = None
    if op in _BINARY_REF and y.dtype in (mx.float32, mx.float16, mx.bfloat16):
        refs = {"y": _quiet(_BINARY_REF[op], _f64(va), _f64(vb))}
    params = {"views": views} if views else {}
    _case(entries, out_dir, name, op, dtype_name(y.dtype), params, {"a": a, "b": b}, {"y": y},
          refs=refs, order=["a", "b"])


def _gen_binary(out_dir):
    entries = []
    for op in _BINARY:
        cmp = op in ("equal", "less", "greater")
        for dn in ("f32", "f16", "bf16"):
            dt = DTYPES[dn]
            # broadcasting [3,1,5] with [4,1] -> [3,4,5]
            name = f"{op}/bcast/{dn}/3x1x5,4x1"
            r = _rng(name)
            a, b = r.standard_normal((3, 1, 5)) * 2.0, r.standard_normal((4, 1)) * 2.0
            if cmp:   # a coarse grid, so equal pairs occur
                a, b = np.round(a * 2) / 2, np.round(b * 2) / 2
            if op == "divide":
                b = np.where(np.abs(b) < 0.1, 0.1, b)
            _binary_case(entries, out_dir, name, op, _cast(a, dt), _cast(b, dt))
            # every pair of edge values: [10,1] against [1,10]
            e = np.array(_edge(dn, op in _BINARY_EXACT)[:_EDGE_PAIRS])
            _binary_case(entries, out_dir, f"{op}/edge/{dn}/10x1,1x10", op,
                         _cast(e[:, None], dt), _cast(e[None, :], dt))
        # strided inputs: a transposed, b a slice
        name = f"{op}/strided/f32/3x5"
        r = _rng(name)
        a = _cast(np.round(r.standard_normal((5, 3)) * 2) / 2, mx.float32)
        b = _cast(np.round(r.standard_normal((4, 8)) * 2) / 2 + 0.25 * (op == "divide"), mx.float32)
        _binary_case(entries, out_dir, name, op, a, b,
                     views={"a": [{"transpose": [1, 0]}], "b": [{"slice": [[1, 2], [4, 7]]}]})
        # int32 (no overflow: MLX leaves it to C++), and divide's promotion to float32
        name = f"{op}/int32/4x6,6"
        r = _rng(name)
        a = mx.array(r.integers(-50, 50, (4, 6)).astype(np.int32))
        b = mx.array(r.integers(-5, 6, (6,)).astype(np.int32))
        _binary_case(entries, out_dir, name, op, a, b)
    # mixed dtypes promote as MLX does
    mixed = [("add", "f16", "bf16"), ("multiply", "int32", "bf16"), ("less", "f16", "f32"),
             ("maximum", "bf16", "f32"), ("subtract", "int32", "f16")]
    for op, da, db in mixed:
        name = f"{op}/mixed/{da}+{db}/3x4"
        r = _rng(name)

        def mk(d, shape):
            if d == "int32":
                return mx.array(r.integers(-9, 10, shape).astype(np.int32))
            return _cast(r.standard_normal(shape) * 3.0, DTYPES[d])
        _binary_case(entries, out_dir, name, op, mk(da, (3, 4)), mk(db, (3, 4)))
    return entries


_UNARY_REF = {
    "exp": _exp, "log": _log, "negative": np.negative, "abs": np.abs,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "square": np.square,
    "sigmoid": lambda x: 1.0 / (1.0 + _exp(-x)), "tanh": _libm(math.tanh, np.tanh),
    "sin": _sin, "cos": _cos,
    "silu": lambda x: x / (1.0 + _exp(-x)),
}
_UNARY_EXACT = {"negative", "abs"}
_UNARY_POSITIVE = {"log", "sqrt", "rsqrt"}


def _unary_mx(op, x):
    return nn.silu(x) if op == "silu" else getattr(mx, op)(x)


def _unary_case(entries, out_dir, name, op, x, views=None):
    v = _view(x, (views or {}).get("x", []))
    y = _unary_mx(op, v)
    mx.eval(y)
    refs = None
    if op not in _UNARY_EXACT and y.dtype in (mx.float32, mx.float16, mx.bfloat16):
        refs = {"y": _quiet(_UNARY_REF[op], _f64(v))}
    params = {"views": views} if views else {}
    _case(entries, out_dir, name, op, dtype_name(y.dtype), params, {"x": x}, {"y": y}, refs=refs)


def _gen_unary(out_dir):
    entries = []
    for op in ("exp", "log", "negative", "abs", "sqrt", "rsqrt", "square", "sigmoid", "tanh",
               "sin", "cos", "silu"):
        for dn in ("f32", "f16", "bf16"):
            dt = DTYPES[dn]
            if op != "silu":   # silu/<dtype>/<shape> cases exist (_gen_elementwise)
                name = f"{op}/{dn}/3x67"
                x = _rng(name).standard_normal((3, 67)) * 3.0
                if op in _UNARY_POSITIVE:
                    x = np.abs(x) + 1e-3
                _unary_case(entries, out_dir, name, op, _cast(x, dt))
            e = _edge(dn, op in _UNARY_EXACT)
            _unary_case(entries, out_dir, f"{op}/edge/{dn}/{len(e)}", op, _cast(np.array(e), dt))
        # a strided input: the transpose of a slice
        name = f"{op}/strided/f32/4x6"
        x = _rng(name).standard_normal((7, 5)) * 3.0
        if op in _UNARY_POSITIVE:
            x = np.abs(x) + 1e-3
        _unary_case(entries, out_dir, name, op, _cast(x, mx.float32),
                    views={"x": [{"slice": [[1, 1], [7, 5]]}, {"transpose": [1, 0]}]})
    # integer inputs: negative, abs and square keep int32; the others give float32
    for op in ("negative", "abs", "square", "exp", "sqrt", "sigmoid"):
        name = f"{op}/int32/13"
        x = np.array([-40000, -7, -1, 0, 1, 2, 3, 9, 46340, -46340, 100, 12, 5], dtype=np.int32)
        if op in ("exp", "sqrt"):
            x = np.abs(x) % 60
        _unary_case(entries, out_dir, name, op, mx.array(x))
    return entries


def _gen_astype(out_dir):
    entries = []
    # float sources: values that round to nearest even in every narrower type,
    # overflow float16, underflow, NaN, ±Inf, ±0, subnormals
    fvals = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -2.5, 1.00390625, 1.01171875,
             1.0000001, 65504.0, 65520.0, 70000.0, -1e5, 3e-8, 6e-8, 1e-40, -1e-39,
             3.3895314e38, 0.1, 1e-3, 123456.789]
    for src in ("f32", "f16", "bf16"):
        for dst in ("f32", "f16", "bf16"):
            if src == dst:
                continue
            v = [f for f in fvals if not (dst == "f16" and math.isnan(f))]  # see _edge
            x = _cast(np.array(v), DTYPES[src])
            _astype_case(entries, out_dir, f"astype/{src}-{dst}/{len(v)}", x, DTYPES[dst])
    # float -> int32 truncates toward zero (only values in range: MLX leaves the rest to C++)
    ivals = [0.0, -0.0, 0.4, -0.6, 1.5, -2.5, 7.99, -7.99, 1000.75, -65504.0, 2.1e9, -2.1e9, 1e-40]
    for src in ("f32", "f16", "bf16"):
        x = _cast(np.array([v for v in ivals if abs(v) < (65504 if src == "f16" else 3e38)]), DTYPES[src])
        _astype_case(entries, out_dir, f"astype/{src}-int32/{x.shape[0]}", x, mx.int32)
        x = _cast(np.array(fvals), DTYPES[src])
        _astype_case(entries, out_dir, f"astype/{src}-bool/{len(fvals)}", x, mx.bool_)
    # int32 -> floats (rounding past 2^24 / 2^8 / 2^11, float16 overflow), bool, uint32 (wraps)
    iv = np.array([0, 1, -1, 255, 257, 2049, -2051, 65519, 65520, 70000, 16777217, -16777219,
                   2147483647, -2147483648], dtype=np.int32)
    for dst, dn in ((mx.float32, "f32"), (mx.float16, "f16"), (mx.bfloat16, "bf16"),
                    (mx.bool_, "bool"), (mx.uint32, "uint32")):
        _astype_case(entries, out_dir, f"astype/int32-{dn}/{len(iv)}", mx.array(iv), dst)
    bv = mx.array(np.array([True, False, True, True, False]))
    for dst, dn in ((mx.float32, "f32"), (mx.bfloat16, "bf16"), (mx.int32, "int32")):
        _astype_case(entries, out_dir, f"astype/bool-{dn}/5", bv, dst)
    uv = mx.array(np.array([0, 1, 4294967295, 2147483648, 16777217, 65520], dtype=np.uint32))
    for dst, dn in ((mx.float32, "f32"), (mx.int32, "int32")):
        _astype_case(entries, out_dir, f"astype/uint32-{dn}/6", uv, dst)
    # a strided source
    name = "astype/strided/f32-bf16/4x3"
    x = _cast(_rng(name).standard_normal((3, 4)) * 10.0, mx.float32)
    _astype_case(entries, out_dir, name, x, mx.bfloat16, views={"x": [{"transpose": [1, 0]}]})
    return entries


def _astype_case(entries, out_dir, name, x, dst, views=None):
    y = _view(x, (views or {}).get("x", [])).astype(dst)
    mx.eval(y)
    params = {"to": dtype_name(dst)}
    if views:
        params["views"] = views
    _case(entries, out_dir, name, "astype", dtype_name(dst), params, {"x": x}, {"y": y})


def _gen_where(out_dir):
    entries = []
    for dn in ("f32", "f16", "bf16", "int32"):
        name = f"where/bcast/{dn}/3x1x5,3x4x5,4x1"
        r = _rng(name)
        cond = mx.array(r.random((3, 1, 5)) < 0.5)
        if dn == "int32":
            a = mx.array(r.integers(-100, 100, (3, 4, 5)).astype(np.int32))
            b = mx.array(r.integers(-100, 100, (4, 1)).astype(np.int32))
        else:
            av = r.standard_normal((3, 4, 5))
            av.flat[:4] = [math.nan, -0.0, math.inf, 1e-40]
            bv = r.standard_normal((4, 1))
            bv.flat[:2] = [-math.inf, math.nan]
            a, b = _cast(av, DTYPES[dn]), _cast(bv, DTYPES[dn])
        _where_case(entries, out_dir, name, cond, a, b)
    name = "where/mixed/f16+f32/4x6"
    r = _rng(name)
    _where_case(entries, out_dir, name, mx.array(r.random((4, 6)) < 0.5),
                _cast(r.standard_normal((4, 6)), mx.float16), _cast(r.standard_normal((4, 6)), mx.float32))
    name = "where/strided/bf16/4x6"
    r = _rng(name)
    _where_case(entries, out_dir, name, mx.array(r.random((6, 4)) < 0.5),
                _cast(r.standard_normal((6, 4)), mx.bfloat16), _cast(r.standard_normal((5, 8)), mx.bfloat16),
                views={"cond": [{"transpose": [1, 0]}], "a": [{"transpose": [1, 0]}],
                       "b": [{"slice": [[1, 2], [5, 8]]}]})
    return entries


def _where_case(entries, out_dir, name, cond, a, b, views=None):
    v = views or {}
    y = mx.where(_view(cond, v.get("cond", [])), _view(a, v.get("a", [])), _view(b, v.get("b", [])))
    mx.eval(y)
    params = {"views": views} if views else {}
    _case(entries, out_dir, name, "where", dtype_name(y.dtype), params,
          {"cond": cond, "a": a, "b": b}, {"y": y}, order=["cond", "a", "b"])


def _shaping_input(name, shape, dn):
    r = _rng(name)
    if dn == "int32":
        return mx.array(r.integers(-1000, 1000, shape).astype(np.int32))
    if dn == "uint32":
        return mx.array(r.integers(0, 2**32, shape).astype(np.uint32))
    return _cast(r.standard_normal(shape), DTYPES[dn])


def _shaping_case(entries, out_dir, name, op, params, inputs, y, order=None):
    mx.eval(y)
    _case(entries, out_dir, name, op, dtype_name(y.dtype), params, inputs, {"y": y}, order=order)


def _gen_shaping(out_dir):
    entries = []
    tr = {"x": [{"transpose": [1, 0]}]}
    # reshape: params.shape may hold one -1
    for dn in ("f32", "bf16", "f16", "int32"):
        for src, shape in (((2, 3, 4), [4, 6]), ((2, 3, 4), [-1, 4]), ((24,), [2, 1, 12])):
            name = f"reshape/{dn}/{_shape(src)}-{_shape(shape)}"
            x = _shaping_input(name, src, dn)
            _shaping_case(entries, out_dir, name, "reshape", {"shape": shape}, {"x": x}, x.reshape(shape))
    name = "reshape/strided/f32/6x4-3x8"
    x = _shaping_input(name, (4, 6), "f32")
    _shaping_case(entries, out_dir, name, "reshape", {"shape": [3, 8], "views": tr}, {"x": x},
                  _view(x, tr["x"]).reshape(3, 8))
    # transpose
    for dn in ("f32", "bf16", "f16", "int32"):
        for src, axes in (((2, 3, 4), [2, 0, 1]), ((2, 3, 4), [1, 0, 2]), ((5, 7), [1, 0])):
            name = f"transpose/{'' .join(map(str, axes))}/{dn}/{_shape(src)}"
            x = _shaping_input(name, src, dn)
            _shaping_case(entries, out_dir, name, "transpose", {"axes": axes}, {"x": x},
                          mx.transpose(x, axes))
    name = "transpose/strided/f32/4x5"
    x = _shaping_input(name, (6, 7), "f32")
    vw = {"x": [{"slice": [[1, 2], [5, 7]]}]}
    _shaping_case(entries, out_dir, name, "transpose", {"axes": [1, 0], "views": vw}, {"x": x},
                  mx.transpose(_view(x, vw["x"]), [1, 0]))
    # slice
    for dn in ("f32", "bf16", "f16", "int32"):
        for src, start, stop in (((5, 6, 7), [1, 0, 2], [4, 6, 7]), ((8, 9), [2, 3], [3, 9])):
            name = f"slice/{dn}/{_shape(src)}/{_shape(start)}-{_shape(stop)}"
            x = _shaping_input(name, src, dn)
            _shaping_case(entries, out_dir, name, "slice", {"start": start, "stop": stop}, {"x": x},
                          _view(x, [{"slice": [start, stop]}]))
    name = "slice/strided/f32/7x6/1x2-5x6"
    x = _shaping_input(name, (6, 7), "f32")
    _shaping_case(entries, out_dir, name, "slice", {"start": [1, 2], "stop": [5, 6], "views": tr},
                  {"x": x}, _view(x, tr["x"] + [{"slice": [[1, 2], [5, 6]]}]))
    # slice_update: dst with src written at start (MLX's x[a:b, ...] = src)
    for dn in ("f32", "bf16", "f16", "int32"):
        for dshape, sshape, start in (((5, 6), (2, 3), [1, 2]), ((2, 4, 6), (2, 1, 3), [0, 3, 1]),
                                      ((3, 4), (3, 4), [0, 0])):
            name = f"slice_update/{dn}/{_shape(dshape)}<{_shape(sshape)}@{_shape(start)}"
            r_dst = _shaping_input(name + "/dst", dshape, dn)
            src = _shaping_input(name + "/src", sshape, dn)
            _shaping_case(entries, out_dir, name, "slice_update", {"start": start},
                          {"dst": r_dst, "src": src}, _slice_update(r_dst, src, start), order=["dst", "src"])
    name = "slice_update/strided/f32/5x6<3x2@1x3"
    d, s = _shaping_input(name + "/dst", (5, 6), "f32"), _shaping_input(name + "/src", (2, 3), "f32")
    vw = {"src": [{"transpose": [1, 0]}]}
    _shaping_case(entries, out_dir, name, "slice_update", {"start": [1, 3], "views": vw},
                  {"dst": d, "src": s}, _slice_update(d, _view(s, vw["src"]), [1, 3]), order=["dst", "src"])
    # concatenate
    for dn in ("f32", "bf16", "f16", "int32"):
        for shapes, axis in ((((2, 3), (2, 1), (2, 4)), 1), (((1, 5), (3, 5)), 0),
                             (((2, 3, 4), (2, 1, 4)), -2)):
            name = f"concatenate/axis{axis}/{dn}/" + ",".join(_shape(s) for s in shapes)
            xs = {f"x{i}": _shaping_input(f"{name}/{i}", s, dn) for i, s in enumerate(shapes)}
            _shaping_case(entries, out_dir, name, "concatenate", {"axis": axis}, xs,
                          mx.concatenate(list(xs.values()), axis=axis), order=list(xs))
    name = "concatenate/mixed/f16+f32/2x3,2x2"
    xs = {"x0": _shaping_input(name + "/0", (2, 3), "f16"), "x1": _shaping_input(name + "/1", (2, 2), "f32")}
    _shaping_case(entries, out_dir, name, "concatenate", {"axis": 1}, xs,
                  mx.concatenate(list(xs.values()), axis=1), order=list(xs))
    name = "concatenate/strided/f32/3x2,3x4"
    xs = {"x0": _shaping_input(name + "/0", (2, 3), "f32"), "x1": _shaping_input(name + "/1", (3, 4), "f32")}
    vw = {"x0": [{"transpose": [1, 0]}]}
    _shaping_case(entries, out_dir, name, "concatenate", {"axis": 1, "views": vw}, xs,
                  mx.concatenate([_view(xs["x0"], vw["x0"]), xs["x1"]], axis=1), order=list(xs))
    # take: int32 indices of any shape, negative ones counting from the end
    for dn in ("f32", "bf16", "f16", "int32", "uint32"):
        for src, ishape, axis in (((10, 6), (7,), 0), ((4, 5, 3), (2, 2), 1), ((5, 6), (3,), 1)):
            name = f"take/axis{axis}/{dn}/{_shape(src)}/idx{_shape(ishape)}"
            x = _shaping_input(name, src, dn)
            r = _rng(name + "/idx")
            n = src[axis]
            idx = r.integers(-n, n, ishape).astype(np.int32)
            idx.flat[0] = n - 1
            ids = mx.array(idx)
            _shaping_case(entries, out_dir, name, "take", {"axis": axis}, {"x": x, "indices": ids},
                          mx.take(x, ids, axis=axis), order=["x", "indices"])
    name = "take/strided/f32/6x5/idx4"
    x = _shaping_input(name, (5, 6), "f32")
    ids = mx.array(np.array([5, 0, -1, 2], dtype=np.int32))
    _shaping_case(entries, out_dir, name, "take", {"axis": 0, "views": tr}, {"x": x, "indices": ids},
                  mx.take(_view(x, tr["x"]), ids, axis=0), order=["x", "indices"])
    return entries


def _slice_update(dst, src, start):
    y = mx.array(dst)
    y[tuple(slice(a, a + n) for a, n in zip(start, src.shape))] = src
    return y


def _gen_fill(out_dir):
    entries = []
    for dn, dt in (("f32", mx.float32), ("f16", mx.float16), ("bf16", mx.bfloat16),
                   ("int32", mx.int32), ("bool", mx.bool_)):
        name = f"zeros/{dn}/3x4"
        y = mx.zeros((3, 4), dtype=dt)
        mx.eval(y)
        _case(entries, out_dir, name, "zeros", dtype_name(dt), {"shape": [3, 4]}, {}, {"y": y})
    # full: the value is rounded to the dtype
    fulls = [("f32", 0.1), ("f32", -math.inf), ("f16", 0.1), ("f16", 65519.0), ("f16", -0.0),
             ("bf16", 0.1), ("bf16", math.nan), ("bf16", 1e-40), ("int32", -7.0), ("bool", 1.0)]
    for dn, v in fulls:
        dt = {"int32": mx.int32, "bool": mx.bool_}.get(dn) or DTYPES[dn]
        name = f"full/{dn}/{v!r}/2x3"
        # MLX's Python full keeps a Python float's float32 for integer dtypes: give it an int
        pv = bool(v) if dn == "bool" else int(v) if dn == "int32" else v
        y = mx.full((2, 3), pv, dtype=dt)
        mx.eval(y)
        if y.dtype != dt:
            raise AssertionError(f"{name}: got dtype {y.dtype}")
        _case(entries, out_dir, name, "full", dtype_name(dt),
              {"shape": [2, 3], "value": repr(v), "doc": "value: the Python float passed, as repr (inf and nan are not JSON)"},
              {}, {"y": y})
    return entries


def _gen_matmul_batched(out_dir):
    """mx.matmul with broadcast batch axes, and a transposed (strided) operand."""
    entries = []
    for dn in ("f32", "bf16", "f16"):
        dt = DTYPES[dn]
        for sa, sb in (((2, 1, 5, 16), (3, 16, 9)), ((5, 16), (2, 16, 9)), ((2, 5, 16), (16, 9))):
            name = f"matmul/bcast/{dn}/{_shape(sa)}@{_shape(sb)}"
            _matmul_case(entries, out_dir, name, dt, sa, sb)
        name = f"matmul/strided/{dn}/2x5x16@2x16x9"
        r = _rng(name)
        a = _cast(r.standard_normal((2, 5, 16)), dt)
        b = _cast(r.standard_normal((2, 9, 16)), dt)
        vw = {"b": [{"transpose": [0, 2, 1]}]}
        bt = _view(b, vw["b"])
        y = mx.matmul(a, bt)
        mx.eval(y)
        _case(entries, out_dir, name, "matmul", dtype_name(dt), {"views": vw},
              {"a": a, "b": b}, {"y": y}, refs={"y": _matmul64(_f64(a), _f64(bt))}, order=["a", "b"])
    return entries


# ----------------------------------------------------------------- sampling

def _logprobs(name, dt, v=1000):
    """Seeded [1, v] log-probabilities (log_softmax in float64, then cast).

    Re-drawn (deterministically) until the 1st, 3rd, 20th and 21st largest
    values are strictly separated in the case dtype, so top-k style filters
    have no tie at their boundary.
    """
    r = _rng(name)
    while True:
        z = r.standard_normal((1, v)) * 2.5
        z = z - z.max()
        lp = z - np.log(np.exp(z).sum())
        x = _cast(lp, dt)
        srt = np.sort(_f64(x)[0])[::-1]
        if len(set(srt[:21])) == 21:
            return x


def _top_p_ref(lp, p):
    """Keep the highest tokens whose cumulative mass (from the top) reaches p."""
    x = lp[0]
    order = np.argsort(x, kind="stable")            # ascending
    sp = x[order]
    probs = np.exp(sp)
    above = np.concatenate([np.cumsum(probs[::-1])[::-1][1:], [0.0]])  # mass strictly above
    drop = np.sum(above >= p * probs.sum())
    thr = sp[drop]
    return np.where(x < thr, -np.inf, x)[None]


def _min_p_ref(lp, m, keep):
    x = lp[0]
    rm = x < x.max() + math.log(m)
    if keep > 1:
        rm[np.argsort(-x, kind="stable")[:keep]] = False
    return np.where(rm, -np.inf, x)[None]


def _top_k_ref(lp, k):
    x = lp[0]
    kth = np.sort(x)[::-1][k - 1]
    return np.where(x >= kth, x, -np.inf)[None]


def _gen_sampling(out_dir):
    entries = []
    for dn in ("f32", "bf16"):
        dt = DTYPES[dn]
        dtn = dtype_name(dt)
        for p in (0.9, 0.5):
            name = f"apply_top_p/p{p:g}/{dn}/1x1000"
            x = _logprobs(name, dt)
            y = apply_top_p(x, p)
            mx.eval(y)
            _case(entries, out_dir, name, "apply_top_p", dtn, {"top_p": p}, {"logprobs": x},
                  {"y": y}, refs={"y": _top_p_ref(_f64(x), p)})
        for keep in (1, 3):
            name = f"apply_min_p/m0.05/keep{keep}/{dn}/1x1000"
            x = _logprobs(name, dt)
            if keep > 1:
                # make min_tokens_to_keep matter: a dominant top token
                a = _f64(x)
                a[0, int(np.argmax(a))] += 6.0
                a = a - np.log(np.exp(a).sum())
                x = _cast(a, dt)
            y = apply_min_p(x, 0.05, keep)
            mx.eval(y)
            _case(entries, out_dir, name, "apply_min_p", dtn,
                  {"min_p": 0.05, "min_tokens_to_keep": keep}, {"logprobs": x}, {"y": y},
                  refs={"y": _min_p_ref(_f64(x), 0.05, keep)})
        for k in (1, 20):
            name = f"apply_top_k/k{k}/{dn}/1x1000"
            x = _logprobs(name, dt)
            y = apply_top_k(x, k)
            mx.eval(y)
            _case(entries, out_dir, name, "apply_top_k", dtn, {"top_k": k}, {"logprobs": x},
                  {"y": y}, refs={"y": _top_k_ref(_f64(x), k)})
        # temperature scaling exactly as categorical_sampling applies it
        temp = 0.7
        name = f"temperature/t{temp:g}/{dn}/1x1000"
        x = _logprobs(name, dt)
        y = x * (1.0 / temp)
        mx.eval(y)
        _case(entries, out_dir, name, "temperature", dtn,
              {"temp": temp, "doc": "y = logprobs * (1/temp), Python float weakly typed"},
              {"logprobs": x}, {"y": y}, refs={"y": _f64(x) / temp})
        # repetition penalty via make_logits_processors
        name = f"repetition_penalty/p1.3/ctx20/{dn}/1x1000"
        r = _rng(name)
        logits = _cast(r.standard_normal((1, 1000)) * 4.0, dt)
        ctx = np.array([3, 999, 3, 41, 0, 7, 7, 12, 500, 41, 2, 999, 77, 3, 300, 301,
                        302, 7, 8, 9, 10, 11, 12, 41, 600], dtype=np.int32)
        tokens = mx.array(ctx)
        procs = make_logits_processors(repetition_penalty=1.3, repetition_context_size=20)
        y = mx.array(logits)        # the processor assigns into its argument
        for proc in procs:
            y = proc(tokens, y)
        mx.eval(y)
        ref = _f64(logits).copy()
        for t in set(ctx[-20:].tolist()):
            v = ref[0, t]
            ref[0, t] = v * 1.3 if v < 0 else v / 1.3
        _case(entries, out_dir, name, "repetition_penalty", dtn,
              {"penalty": 1.3, "context_size": 20}, {"tokens": tokens, "logits": logits},
              {"y": y}, refs={"y": ref}, order=["tokens", "logits"])
        # categorical with an explicit key. Single rows only: generation samples
        # one row at a time (MLX's inverse-CDF path); the several-row Gumbel-max
        # path serves batched and speculative sampling, which mlxgo does not
        # offer yet, so it has no fixture to hold a backend to.
        for rows in (1,):
            for seed in range(5):
                name = f"categorical/seed{seed}/{dn}/{rows}x1000"
                x = _logprobs(f"categorical/{dn}/{rows}x1000", dt) if rows == 1 else \
                    _cast(_rng(f"categorical/{dn}/{rows}x1000").standard_normal((rows, 1000)) * 2.0, dt)
                key = mx.random.key(seed)
                tok = mx.random.categorical(x, key=key)
                mx.eval(tok, key)
                _case(entries, out_dir, name, "categorical", dtn, {"seed": seed, "axis": -1},
                      {"logits": x, "key": key}, {"token": tok}, order=["logits", "key"])
        # categorical after top-k (most weights are exactly zero)
        for seed in (0, 1, 2):
            name = f"categorical/topk20/seed{seed}/{dn}/1x1000"
            x = apply_top_k(_logprobs(f"categorical/topk20/{dn}", dt), 20)
            key = mx.random.key(seed)
            tok = mx.random.categorical(x, key=key)
            mx.eval(x, tok, key)
            _case(entries, out_dir, name, "categorical", dtn, {"seed": seed, "axis": -1},
                  {"logits": x, "key": key}, {"token": tok}, order=["logits", "key"])
        # the compiled sampling entry points, driven by the global seed exactly as
        # generate_step drives them: mx.random.seed(seed), then one call
        for seed in (0, 1):
            name = f"categorical_sampling/t0.7/seed{seed}/{dn}/1x1000"
            x = _logprobs(f"categorical_sampling/{dn}", dt)
            mx.random.seed(seed)
            tok = categorical_sampling(x, 0.7)
            mx.eval(tok)
            _case(entries, out_dir, name, "categorical_sampling", dtn,
                  {"seed": seed, "temp": 0.7,
                   "doc": "mx.random.seed(seed); categorical(logprobs * (1/temp)) with the split-off key"},
                  {"logprobs": x}, {"token": tok})
            name = f"make_sampler/t0.7_p0.9_m0.05_k20/seed{seed}/{dn}/1x1000"
            x = _logprobs(f"make_sampler/{dn}", dt)
            sampler = make_sampler(temp=0.7, top_p=0.9, min_p=0.05, min_tokens_to_keep=1, top_k=20)
            mx.random.seed(seed)
            tok = sampler(x)
            mx.eval(tok)
            _case(entries, out_dir, name, "make_sampler", dtn,
                  {"seed": seed, "temp": 0.7, "top_p": 0.9, "min_p": 0.05,
                   "min_tokens_to_keep": 1, "top_k": 20, "xtc_probability": 0.0,
                   "doc": "mx.random.seed(seed); make_sampler(...)(logprobs): top_p, min_p, top_k, categorical"},
                  {"logprobs": x}, {"token": tok})
    mx.random.seed(0)
    return entries


_M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def _threefry2x32(key, count):
    """Threefry-2x32, 20 rounds, as mlx/random.cpp uses it (reference only)."""
    ks = [key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA]
    x = [(count[0] + ks[0]) & _M32, (count[1] + ks[1]) & _M32]
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    for i in range(5):
        for r in rot[i % 2]:
            x[0] = (x[0] + x[1]) & _M32
            x[1] = _rotl(x[1], r) ^ x[0]
        x[0] = (x[0] + ks[(i + 1) % 3]) & _M32
        x[1] = (x[1] + ks[(i + 2) % 3] + i + 1) & _M32
    return x


def _bits_ref(key, n):
    """The n uint32 words mlx.random.bits draws from one key (CPU RandomBits layout)."""
    key = [int(k) for k in key]
    half, odd = n // 2, n % 2
    out = [0] * n
    for j in range(half):
        a, b = _threefry2x32(key, (j, j + half + odd))
        out[j], out[j + half + odd] = a, b
    if odd:
        out[half] = _threefry2x32(key, (half, 0))[0]
    return np.array(out, dtype=np.uint32)


def _gen_random(out_dir):
    """RNG cases. Python exposes no raw `bits`, but split(key, num) is exactly
    bits([num, 2], key): those cases are the raw threefry stream. The reference
    generator above is checked against them before it is used for uniform."""
    entries = []
    for seed in (0, 42, 2**33 + 5):
        key = mx.random.key(seed)
        mx.eval(key)
        _case(entries, out_dir, f"random_key/seed{seed}", "random_key", "float32",
              {"seed": seed}, {}, {"key": key})
        for num in (2, 3, 5):
            ks = mx.random.split(key, num=num)
            mx.eval(ks)
            want = _bits_ref(np.array(key), 2 * num).reshape(num, 2)
            if not np.array_equal(np.array(ks), want):
                raise AssertionError(f"threefry reference disagrees with split(seed {seed}, {num})")
            _case(entries, out_dir, f"random_split/num{num}/seed{seed}", "random_split",
                  "float32", {"num": num, "doc": "split(key, num) == bits([num, 2], key)"},
                  {"key": key}, {"keys": ks})
        for n in (1, 7, 10):
            u = mx.random.uniform(shape=(n,), key=key)
            mx.eval(u)
            words = _bits_ref(np.array(key), n).astype(np.float64)
            ref = np.minimum(words / 4294967296.0, float(np.nextafter(np.float32(1), np.float32(0))))
            _case(entries, out_dir, f"random_uniform/seed{seed}/f32/{n}", "random_uniform",
                  "float32", {"shape": [n], "low": 0.0, "high": 1.0}, {"key": key}, {"u": u},
                  refs={"u": ref})
    return entries


# ----------------------------------------------------------------- entry point

def generate(out_dir):
    """Write every op case under out_dir; return their index entries."""
    mx.set_default_device(mx.cpu)
    STATS.clear()
    entries = []
    for gen in (_gen_quant, _gen_qmm, _gen_embedding, _gen_matmul, _gen_rms_norm, _gen_rope,
                _gen_sdpa, _gen_elementwise, _gen_reductions, _gen_sampling, _gen_random,
                _gen_matmul_batched, _gen_binary, _gen_unary, _gen_astype, _gen_where,
                _gen_shaping, _gen_fill):
        entries += gen(out_dir)
    names = [e["name"] for e in entries]
    if len(set(names)) != len(names):
        raise AssertionError("duplicate op case names")
    return entries


def main():
    import collections
    import os
    import tempfile
    import time

    with tempfile.TemporaryDirectory() as tmp:
        t = time.time()
        entries = generate(tmp)
        dt = time.time() - t
        sizes = collections.Counter()
        counts = collections.Counter()
        for e in entries:
            op = e["name"].split("/")[0]
            counts[op] += 1
            stem = e["file"][: -len(".json")]
            sizes[op] += os.path.getsize(e["file"]) + os.path.getsize(stem + ".safetensors")
        print(f"{len(entries)} cases, {sum(sizes.values()) / 1e6:.2f} MB, {dt:.1f} s")
        for op in sorted(counts):
            print(f"  {op:30s} {counts[op]:4d} cases {sizes[op] / 1e3:9.1f} kB")
    agg = {}
    for op, dt, name, ab, ulp, rel, infm in STATS:
        key = (op + ("/edge" if name.endswith("/edge") else ""), dt)
        a = agg.setdefault(key, [0.0, 0.0, 0.0, 0, "", 0])
        if ab > a[0]:
            a[0], a[4] = ab, name
        a[1] = max(a[1], ulp)
        a[2] = max(a[2], rel)
        a[3] += infm
        a[5] += 1
    print(f"\n{'op':30s} {'dtype':9s} {'n':>3s} {'max abs':>10s} {'max ulp':>9s} {'max rel':>10s} infmis  worst case (abs)")
    for (op, dt), (ab, ulp, rel, infm, n1, n) in sorted(agg.items()):
        print(f"{op:30s} {dt:9s} {n:3d} {ab:10.3e} {ulp:9.2f} {rel:10.3e} {infm:6d}  {n1}")


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
