"""mlx_lm.lora with its arguments, then MLX's peak memory (bench/trainmem.sh).

mlx_lm 0.32's table UI leaves the peak memory out of its progress lines;
this prints mx.get_peak_memory() (since the process started, as mlxgo's MLX
backend reports it) in mlxgo's words once training is done.
"""
import sys

import mlx.core as mx
from mlx_lm import lora

sys.argv = ["mlx_lm.lora"] + sys.argv[1:]
lora.main()
print(f"Peak mem {mx.get_peak_memory() / 1e9:.3f} GB")
