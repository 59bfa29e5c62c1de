"""Extract from the mlx-cuda wheel the part of mlx/include that MLX's NVRTC JIT reads on an
H200 for the kernels mlxgo's benchmarks use: every mlx/ header, and the include closure of the
headers the JIT sources name (cute, cutlass's numeric types and conversions, cccl's cuda/std),
so that the carried bundle stays small. Usage: include_closure.py WHEEL OUTDIR."""
import collections
import os
import re
import sys
import zipfile

wheel, out = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(wheel)
files = {n[len("mlx/include/"):]: n for n in z.namelist() if n.startswith("mlx/include/") and not n.endswith("/")}
roots = ["", "cccl/"]
include = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
# The <...> headers of the JIT sources embedded in libmlx.so (strings libmlx.so | grep '#include').
seeds = ["cute/numeric/numeric_types.hpp", "cute/tensor.hpp", "cutlass/cutlass.h", "cutlass/numeric_conversion.h",
         "cuda/atomic", "cuda/cmath", "cuda/std/array", "cuda/std/cmath", "cuda/std/complex", "cuda/std/limits",
         "cuda/std/tuple", "cuda/std/type_traits"]
stack = [r + s for s in seeds for r in roots if r + s in files] + [f for f in files if f.startswith("mlx/")]
seen = set()
while stack:
    f = stack.pop()
    if f in seen:
        continue
    seen.add(f)
    text = z.read(files[f]).decode("utf8", "replace")
    for m in include.findall(text):
        for cand in [os.path.normpath(os.path.join(os.path.dirname(f), m))] + [r + m for r in roots]:
            if cand in files:
                stack.append(cand)
                break
for f in seen:
    z.extract(files[f], out)
print(len(seen), "headers:", dict(collections.Counter(f.split("/")[0] for f in seen)))
