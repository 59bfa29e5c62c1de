"""MLX oracle for the kernel package tests (mlx_oracle_test.go).

Usage: python mlx_oracle.py DIR

DIR/cases.json lists cases written by the Go test; each input is a raw
little-endian float32 file DIR/<case>.<input>.bin holding values already
representable in the case dtype. For each case this script runs MLX on its CPU
device and writes every output as DIR/<case>.<output>.bin: float arrays as
float32 (bf16/f16 widen exactly), packed weights as uint32.
"""
import json
import os
import sys

import mlx.core as mx
import numpy as np
from mlx_lm.models.activations import swiglu

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


def main(d):
    mx.set_default_device(mx.cpu)
    with open(os.path.join(d, "cases.json")) as f:
        cases = json.load(f)

    def load(c, name, shape, dtype=np.float32):
        a = np.fromfile(os.path.join(d, f"{c['name']}.{name}.bin"), dtype=dtype)
        return a.reshape(shape)

    def save(c, name, a):
        a = np.array(a.astype(mx.float32) if a.dtype != mx.uint32 else a)
        a.tofile(os.path.join(d, f"{c['name']}.{name}.bin"))

    for c in cases:
        dt = DTYPES[c["dtype"]]
        op = c["op"]
        if op == "quantize":
            w = mx.array(load(c, "w", (c["rows"], c["cols"]))).astype(dt)
            wq, s, b = mx.quantize(w, group_size=c["group"], bits=c["bits"])
            deq = mx.dequantize(wq, s, b, group_size=c["group"], bits=c["bits"])
            for name, a in (("wq", wq), ("scales", s), ("biases", b), ("deq", deq)):
                save(c, name, a)
        elif op == "swiglu":
            g = mx.array(load(c, "gate", (-1,))).astype(dt)
            u = mx.array(load(c, "up", (-1,))).astype(dt)
            save(c, "out", swiglu(g, u))
        elif op == "rms_norm":
            x = mx.array(load(c, "x", (c["rows"], c["n"]))).astype(dt)
            w = mx.array(load(c, "w", (c["n"],))).astype(dt)
            save(c, "out", mx.fast.rms_norm(x, w, c["eps"]))
        elif op == "rope":
            shape = (c["b"], c["h"], c["l"], c["d"])
            x = mx.array(load(c, "x", shape)).astype(dt)
            off = mx.array(np.array(c["offsets"], dtype=np.int32))
            if len(c["offsets"]) == 1:
                off = c["offsets"][0]
            out = mx.fast.rope(x, c["dims"], traditional=c["traditional"], base=c["base"],
                               scale=c["scale"], offset=off)
            save(c, "out", out)
        elif op == "sdpa":
            q = mx.array(load(c, "q", (c["b"], c["h"], c["l"], c["d"]))).astype(dt)
            k = mx.array(load(c, "k", (c["b"], c["hk"], c["s"], c["d"]))).astype(dt)
            v = mx.array(load(c, "v", (c["b"], c["hk"], c["s"], c["d"]))).astype(dt)
            mask = "causal" if c["causal"] else None
            save(c, "out", mx.fast.scaled_dot_product_attention(q, k, v, scale=c["scale"], mask=mask))
        elif op == "qmm":
            x = mx.array(load(c, "x", (c["m"], c["k"]))).astype(dt)
            w = mx.array(load(c, "w", (c["n"], c["k"]))).astype(dt)
            wq, s, b = mx.quantize(w, group_size=c["group"], bits=c["bits"])
            y = mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=c["group"], bits=c["bits"])
            for name, a in (("wq", wq), ("scales", s), ("biases", b), ("out", y)):
                save(c, name, a)
        else:
            raise SystemExit(f"mlx_oracle.py: unknown op {op!r} in case {c['name']}")
        mx.eval()


if __name__ == "__main__":
    main(sys.argv[1])
