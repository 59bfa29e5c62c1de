"""`make oracle-check`: regenerate every fixture into a temporary directory and
compare it with the committed conformance/testdata, file by file.

Rule: every file must be byte-identical (MLX's CPU device is deterministic for
these inputs; if that ever stops holding, this script is where per-array rules
go, documented in conformance/README.md).
"""

import filecmp
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
COMMITTED = os.path.join(HERE, "..", "testdata")


def files(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(HERE, "generate.py"), "--out", tmp], check=True)
        want, got = files(COMMITTED), files(tmp)
        bad = []
        for f in sorted(want - got):
            bad.append(f"committed but not regenerated: {f}")
        for f in sorted(got - want):
            bad.append(f"regenerated but not committed: {f}")
        for f in sorted(want & got):
            if not filecmp.cmp(os.path.join(COMMITTED, f), os.path.join(tmp, f), shallow=False):
                bad.append(f"differs: {f}")
        if bad:
            print("oracle-check FAILED:\n  " + "\n  ".join(bad))
            sys.exit(1)
        print(f"oracle-check: {len(want)} fixture files reproduced byte for byte")


if __name__ == "__main__":
    main()
