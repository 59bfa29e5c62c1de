"""TurboQuant KV codec fixtures: an independent plain numpy implementation of the seed's
scheme (docs: shared/research/turboquant_lora_orpo.md §1.4-1.5; README "KV caches").

No installable package computes this scheme (mlx-optiq 0.7.7 stubs it, vllm-metal 0.1.0
predates it), so this file implements it from the specification, vectorised over rows:

  keys    per group of 32 along head_dim, float32, eps = 1e-8, round half to even:
          8 bits (signed):  s = (M-m)/254, z = round((M+m)/(2(s+eps))), q = clip(round(x/(s+eps)-z), -127, 127)
          b bits (unsigned): s = (M-m)/(2^b-1), z = round(m/(s+eps)), q = clip(round(x/(s+eps)-z), 0, 2^b-1)
          s, z stored float16; decode (q + z)·s in float32
  values  y = H(σ ⊙ v)·float32(1/√d) (Sylvester Walsh-Hadamard, butterflies h = 1, 2, ..., d/2,
          the scale applied after the last stage), ρ = sqrt(Σ_j y_j² / 32) (float32, summed in
          order j = 0..31) per group, code = #{boundaries < y/(ρ+eps)}, ρ stored float16;
          decode c[code]·ρ16 (rotated domain), then H(·)·scale ⊙ σ
  packing little-endian bitstream, element i at bits [i·b, (i+1)·b)

The sign vectors and codebooks are the seed's tables (nn/turboquant/tables.json); this
module checks the sign vectors against MLX's RNG (mx.random.key(42)) and the 3-bit codebook
against vllm-metal's decimal table before using them. Attention outputs come from MLX's own
fused SDPA on the windows this module decodes (the deferred one un-rotated here), with
float64 references.
"""

import json
import os

import mlx.core as mx
import numpy as np

import common

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLES = os.path.join(ROOT, "nn", "turboquant", "tables.json")
GROUP = 32
EPS = np.float32(1e-8)

SCHEMES = [(8, 3), (4, 3), (4, 2), (8, 4), (2, 5), (5, 8)]
HEAD_DIMS = [64, 128]


def load_tables():
    with open(TABLES) as f:
        t = json.load(f)
    signs = {int(d): np.array(v, dtype=np.float32) for d, v in t["signs"].items()}
    books = {int(b): (np.array(c["centroids"], dtype=np.float32), np.array(c["boundaries"], dtype=np.float32))
             for b, c in t["codebooks"].items()}
    for d, s in signs.items():
        want = np.array(1 - 2 * mx.random.randint(0, 2, shape=(d,), key=mx.random.key(42)), dtype=np.float32)
        if not np.array_equal(s, want):
            raise SystemExit(f"tables.json: sign vector {d} differs from 1 - 2·randint(key(42))")
    c3 = np.array([-2.15195, -1.34391, -0.75601, -0.24509, 0.24509, 0.75601, 1.34391, 2.15195], dtype=np.float32)
    b3 = np.array([-1.74793, -1.04996, -0.50055, 0.0, 0.50055, 1.04996, 1.74793], dtype=np.float32)
    if not (np.array_equal(books[3][0], c3) and np.array_equal(books[3][1], b3)):
        raise SystemExit("tables.json: the 3-bit codebook differs from vllm-metal's table")
    for b, (c, bd) in books.items():
        mid = ((c[:-1] + c[1:]) * np.float32(0.5)).astype(np.float32)
        if b != 3 and not np.array_equal(mid, bd):
            raise SystemExit(f"tables.json: {b}-bit boundaries are not the centroids' midpoints")
    return signs, books


def groups(x):
    return x.reshape(*x.shape[:-1], -1, GROUP)


def encode_keys(x, bits):
    """x float32 [..., d] -> codes (int8 or uint8) [..., d], scales and zeros float16 [..., d/32]."""
    g = groups(x.astype(np.float32))
    lo = g.min(axis=-1, keepdims=True)
    hi = g.max(axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        if bits == 8:
            s = ((hi - lo) / np.float32(254)).astype(np.float32)
            z = np.round((hi + lo) / (np.float32(2) * (s + EPS))).astype(np.float32)
            q = np.clip(np.round(g / (s + EPS) - z), -127, 127).astype(np.int8)
        else:
            top = np.float32(2**bits - 1)
            s = ((hi - lo) / top).astype(np.float32)
            z = np.round(lo / (s + EPS)).astype(np.float32)
            q = np.clip(np.round(g / (s + EPS) - z), 0, top).astype(np.uint8)
        return q.reshape(x.shape), s[..., 0].astype(np.float16), z[..., 0].astype(np.float16)


def decode_keys(q, s, z):
    g = groups(q.astype(np.float32))
    with np.errstate(invalid="ignore"):
        out = (g + z.astype(np.float32)[..., None]) * s.astype(np.float32)[..., None]
    return out.astype(np.float32).reshape(q.shape)


def hadamard(x):
    """The scaled Sylvester Walsh-Hadamard transform along the last axis, float32."""
    y = np.array(x, dtype=np.float32, copy=True)
    d = y.shape[-1]
    h = 1
    while h < d:
        v = y.reshape(*y.shape[:-1], d // (2 * h), 2, h)
        a = v[..., 0, :].copy()
        b = v[..., 1, :].copy()
        v[..., 0, :] = a + b
        v[..., 1, :] = a - b
        h *= 2
    return (y * np.float32(1 / np.sqrt(np.float64(d)))).astype(np.float32)


def encode_values(x, bits, signs, books):
    d = x.shape[-1]
    y = groups(hadamard(x.astype(np.float32) * signs[d]))
    acc = np.zeros(y.shape[:-1], dtype=np.float32)
    for j in range(GROUP):
        acc = (acc + y[..., j] * y[..., j]).astype(np.float32)
    rho = np.sqrt(acc / np.float32(GROUP)).astype(np.float32)
    u = y / (rho[..., None] + EPS)
    codes = (u[..., None] > books[bits][1]).sum(axis=-1).astype(np.uint8)
    return codes.reshape(x.shape), rho.astype(np.float16)


def decode_values_rotated(codes, rho, bits, books):
    c = books[bits][0][groups(codes).astype(np.int64)]
    return (c * rho.astype(np.float32)[..., None]).astype(np.float32).reshape(codes.shape)


def unrotate(y, signs):
    return (hadamard(y) * signs[y.shape[-1]]).astype(np.float32)


def pack(codes, bits):
    """codes [..., n] (each < 2^bits) -> uint8 [..., n·bits/8], little-endian bitstream."""
    c = codes.view(np.uint8) if codes.dtype == np.int8 else codes.astype(np.uint8)
    if bits == 8:
        return c.copy()
    n = c.shape[-1]
    bitplanes = ((c[..., None] >> np.arange(bits, dtype=np.uint8)) & 1).reshape(*c.shape[:-1], n * bits)
    return np.packbits(bitplanes, axis=-1, bitorder="little")


def sdpa64(q, k, v, scale, causal):
    """Float64 reference attention with GQA (query head h reads KV head h // (H/Hk))."""
    H, Hk = q.shape[1], k.shape[1]
    k = np.repeat(k.astype(np.float64), H // Hk, axis=1)
    v = np.repeat(v.astype(np.float64), H // Hk, axis=1)
    s = (q.astype(np.float64) * scale) @ np.swapaxes(k, -1, -2)
    if causal:
        L, S = s.shape[-2:]
        keep = np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L)
        s = np.where(keep, s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v


def hadamard64(x):
    d = x.shape[-1]
    idx = np.arange(d)
    sign = np.array([[(-1) ** bin(i & j).count("1") for j in idx] for i in idx], dtype=np.float64)
    return x.astype(np.float64) @ sign / np.sqrt(d)


def make_case(out, kbits, vbits, d, constant, signs, books):
    B, Hk, H, T, L = 1, 2, 4, 37, 3
    seed = 1000 * kbits + 100 * vbits + d + (7 if constant else 0)
    rng = np.random.default_rng(seed)
    k = rng.normal(0, 1.5, (B, Hk, T, d)).astype(np.float32)
    v = rng.normal(0, 1.0, (B, Hk, T, d)).astype(np.float32)
    k[..., :4] *= 8  # outlier channels, as real keys have
    q = rng.normal(0, 1.0, (B, H, L, d)).astype(np.float32)
    if constant:
        k[0, 0, 0, 0:32] = 0.0  # s = z = 0: decodes to 0
        k[0, 0, 1, 32:64] = 1e-4  # z = 1e4, finite in float16: decodes to 0
        k[0, 1, 2, 0:32] = 0.01  # z = 1e6 overflows float16: decodes to NaN
        v[0, 0, 3, :] = 0.0  # ρ = 0 in every group
        v[0, 1, 4, 0:32] = 0.5
    kq, ks, kz = encode_keys(k, kbits)
    vq, vs = encode_values(v, vbits, signs, books)
    kwin = decode_keys(kq, ks, kz)
    vrot = decode_values_rotated(vq, vs, vbits, books)
    vwin = unrotate(vrot, signs)
    scale = float(np.float32(d**-0.5))
    mask = "causal" if L > 1 else None
    eager = mx.fast.scaled_dot_product_attention(mx.array(q), mx.array(kwin), mx.array(vwin), scale=scale, mask=mask)
    rot = mx.fast.scaled_dot_product_attention(mx.array(q), mx.array(kwin), mx.array(vrot), scale=scale, mask=mask)
    deferred = unrotate(np.array(rot), signs)
    with np.errstate(invalid="ignore"):
        ref_eager = sdpa64(q, kwin, vwin, np.float64(scale), L > 1)
        ref_deferred = hadamard64(sdpa64(q, kwin, vrot, np.float64(scale), L > 1)) * signs[d].astype(np.float64)
    name = f"turboquant/k{kbits}v{vbits}/d{d}" + ("/constant" if constant else "")
    outputs = {
        "k_codes": kq, "k_scales": ks, "k_zeros": kz, "k_packed": pack(kq, kbits),
        "v_codes": vq, "v_scales": vs, "v_packed": pack(vq, vbits),
        "k_window": kwin, "v_window": vwin, "v_rotated": vrot,
        "attn_eager": eager, "attn_deferred": deferred,
    }
    tol = {o: "turboquant_attention" for o in ("attn_eager", "attn_deferred")}
    return common.write_case(
        out, name, "op", "turboquant", "float32",
        {"k_bits": kbits, "v_bits": vbits, "scale": scale, "causal": L > 1, "constant_groups": constant,
         "input_order": ["q", "k", "v"],
         "doc": "TurboQuant codec of k and v, the windows it decodes, and attention of q over them (eager, deferred)"},
        {"q": q, "k": k, "v": v}, outputs, "turboquant",
        references={"attn_eager": ref_eager, "attn_deferred": ref_deferred},
        extra={"output_tolerance": tol},
    )


def generate(out):
    signs, books = load_tables()
    entries = []
    for kbits, vbits in SCHEMES:
        for d in HEAD_DIMS:
            entries.append(make_case(out, kbits, vbits, d, False, signs, books))
    for d in HEAD_DIMS:
        entries.append(make_case(out, 8, 3, d, True, signs, books))
        entries.append(make_case(out, 4, 2, d, True, signs, books))
    return entries
