#!/bin/bash
# H200: the context sweep (issue 16) of the Go MLX backend (mlx-gpu) beside mlx_lm's own caches
# (bench/mlx_lm_driver.py --contexts, kv_bits through maybe_quantize_kv_cache) on the synthetic
# MiniCPM5-1B, with the carry of run-batch.sh. CONTEXTS, KINDS, REPS override the defaults.
set -u
. bench/h200/setup.sh
CONTEXTS=${CONTEXTS:-1k,4k,8k,16k,32k}; KINDS=${KINDS:-full,quantized,turbo}; REPS=${REPS:-2}
{ envinfo
  $W/mlxgo synth --preset minicpm5-1b --quant optiq --out /tmp/synth; } > $R/env.log 2>&1 || { cat $R/env.log; pack; exit 1; }
tail -3 $R/env.log
A="--model /tmp/synth --python $PY --driver bench/mlx_lm_driver.py --kv-cache $KINDS"
echo "== warm-up at $(el)s"
$W/mlxgo bench $A --contexts 256,512 --context-prefill 64 --decode-tokens 8 --configs mlx-gpu,mlx_lm --reps 1 --warmup 0 --results= > $R/warmup.log 2>&1
grep -E "^\| " $R/warmup.log | head -8
echo "== sweep at $(el)s: $CONTEXTS"
$W/mlxgo bench $A --contexts $CONTEXTS --decode-tokens 32 --configs mlx-gpu,mlx_lm --reps $REPS --warmup 1 --results $R > $R/context.log 2>&1; echo "rc $?" >> $R/context.log
grep -E "^\| |^rc" $R/context.log | tail -20
echo "== end at $(el)s"; pack; ls $R
