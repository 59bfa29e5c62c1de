"""The oracle: writes every conformance fixture from MLX / mlx_lm (pinned).

Usage: python conformance/oracle/generate.py --out conformance/testdata [--only ops|models]

Run by `make oracle`; never at test time. See conformance/README.md for the format.
"""

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402

import common  # noqa: E402
import models  # noqa: E402
import ops  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="fixture directory to (re)write")
    ap.add_argument("--only", choices=["ops", "models"], help="generate one part only (for development)")
    args = ap.parse_args()

    mx.set_default_device(mx.cpu)
    out = args.out
    entries = []
    if args.only in (None, "ops"):
        shutil.rmtree(os.path.join(out, "ops"), ignore_errors=True)
        entries += ops.generate(os.path.join(out, "ops"))
    if args.only in (None, "models"):
        shutil.rmtree(os.path.join(out, "models"), ignore_errors=True)
        entries += models.generate(os.path.join(out, "models"))
    if args.only is None:
        index = {
            "format": common.FORMAT_VERSION,
            "oracle": common.versions(),
            "cases": sorted(
                ({"name": e["name"], "kind": e["kind"], "file": os.path.relpath(e["file"], out)} for e in entries),
                key=lambda e: e["name"],
            ),
        }
        names = [c["name"] for c in index["cases"]]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            sys.exit(f"duplicate case names: {sorted(dup)}")
        common.write_json(os.path.join(out, "manifest.json"), index)
    print(f"wrote {len(entries)} cases under {out}")


if __name__ == "__main__":
    main()
