"""Fixture writer shared by every oracle generator module.

The on-disk format is documented in conformance/README.md ("Fixture format").
Everything written here is deterministic: sorted JSON keys, tensors in sorted
order, no timestamps, so regenerating reproduces the committed bytes.
"""

import json
import os
import re
import struct

import mlx.core as mx
import numpy as np

FORMAT_VERSION = 1

# safetensors dtype names for numpy dtypes; BF16 is handled separately
# because numpy has no bfloat16.
_NP_TO_ST = {
    np.dtype(np.float64): "F64",
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64",
    np.dtype(np.int32): "I32",
    np.dtype(np.int16): "I16",
    np.dtype(np.int8): "I8",
    np.dtype(np.uint64): "U64",
    np.dtype(np.uint32): "U32",
    np.dtype(np.uint16): "U16",
    np.dtype(np.uint8): "U8",
    np.dtype(np.bool_): "BOOL",
}

_MX_NAMES = {
    mx.float32: "float32",
    mx.float16: "float16",
    mx.bfloat16: "bfloat16",
    mx.float64: "float64",
    mx.int32: "int32",
    mx.uint32: "uint32",
    mx.int64: "int64",
    mx.uint8: "uint8",
    mx.bool_: "bool",
}


def dtype_name(dt):
    """MLX dtype -> the name used in case manifests ("bfloat16", ...)."""
    return _MX_NAMES[dt]


def versions():
    """Package versions recorded in every manifest."""
    import importlib.metadata as md

    return {
        "mlx": md.version("mlx"),
        "mlx_lm": md.version("mlx-lm"),
        "numpy": np.__version__,
    }


def _to_raw(a):
    """Return (safetensors dtype name, shape, bytes) for an mx.array or np.ndarray."""
    if isinstance(a, mx.array):
        mx.eval(a)
        if a.dtype == mx.bfloat16:
            bits = np.array(a.view(mx.uint16), copy=True)
            return "BF16", list(a.shape), np.ascontiguousarray(bits).astype("<u2").tobytes()
        a = np.array(a, copy=True)
    a = np.ascontiguousarray(a)
    name = _NP_TO_ST.get(a.dtype)
    if name is None:
        raise TypeError(f"no safetensors dtype for numpy {a.dtype}")
    return name, list(a.shape), a.astype(a.dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, arrays, metadata=None):
    """Write a dict name -> array as safetensors, tensors in sorted name order."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(arrays):
        dt, shape, raw = _to_raw(arrays[name])
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "mlxgo-fixture"})
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def slug(name):
    """Case name -> file stem: "/" becomes "__", anything unusual becomes "_"."""
    return re.sub(r"[^A-Za-z0-9._=-]", "_", name.replace("/", "__"))


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, sort_keys=True, indent=1)
        f.write("\n")


def write_case(directory, name, kind, op, dtype, params, inputs, outputs,
               tolerance, references=None, extra=None):
    """Write one case: <slug>.json (manifest) and <slug>.safetensors (arrays).

    name       unique case name encoding its parameters, e.g. "rms_norm/bf16/7x1536"
    kind       "op" or "model"
    op         the op (kind "op") or phase (kind "model") the case exercises
    dtype      activation dtype name ("float32", "bfloat16", "float16")
    params     JSON-able dict of parameters
    inputs     dict name -> array, passed in the order of `params["input_order"]`
               when given, else sorted
    outputs    dict name -> array: what the oracle (MLX) produced
    tolerance  tolerance class name (conformance/tolerance.go keys on it)
    references optional dict output name -> numpy array: a float64 (or, when the
               reference ran in float32, float32) reference computed from the same
               inputs, used to derive budgets
    extra      optional JSON-able dict merged into the manifest
    Returns the manifest entry {"name", "kind", "file"} for the index.
    """
    os.makedirs(directory, exist_ok=True)
    stem = slug(name)
    arrays = {}
    for k, v in inputs.items():
        arrays["in." + k] = v
    for k, v in outputs.items():
        arrays["out." + k] = v
    for k, v in (references or {}).items():
        # float64, or float32 when the reference computation itself ran in float32
        # (storing its values as F64 would double the bytes and add nothing).
        v = np.asarray(v)
        v = v if v.dtype == np.float32 else v.astype(np.float64)
        # One NaN for every NaN: numpy's vector math (its SIMD log on a negative, for
        # one) sets the sign bit of a NaN differently on different CPUs, and the
        # references must come out the same bytes wherever they are made.
        arrays["ref." + k] = np.where(np.isnan(v), v.dtype.type(np.nan), v)
    write_safetensors(os.path.join(directory, stem + ".safetensors"), arrays)
    order = params.get("input_order") if params else None
    manifest = {
        "format": FORMAT_VERSION,
        "name": name,
        "kind": kind,
        "op": op,
        "dtype": dtype,
        "params": params or {},
        "inputs": list(order) if order else sorted(inputs),
        "outputs": sorted(outputs),
        "references": sorted(references or {}),
        "tolerance": tolerance,
        "arrays": stem + ".safetensors",
        "oracle": versions(),
    }
    if extra:
        manifest.update(extra)
    write_json(os.path.join(directory, stem + ".json"), manifest)
    return {"name": name, "kind": kind, "file": os.path.join(directory, stem + ".json")}
