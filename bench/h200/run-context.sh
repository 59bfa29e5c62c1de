#!/bin/bash
# H200: the context sweep (issue 16) of the Go MLX backend (mlx-gpu) beside mlx_lm's own caches
# (bench/mlx_lm_driver.py --contexts, kv_bits through maybe_quantize_kv_cache) on the synthetic
# MiniCPM5-1B, with the carry of run-batch.sh. CONTEXTS, KINDS, REPS override the defaults.
set -u
T0=$(date +%s); el(){ echo $(( $(date +%s)-T0 )); }
CONTEXTS=${CONTEXTS:-1k,4k,8k,16k,32k}; KINDS=${KINDS:-full,quantized,turbo}; REPS=${REPS:-2}
W=/tmp/w; R=/tmp/res; mkdir -p $W $R /tmp/site
C=.whl/carry
xz -dc $C/mlxcuda-slim.tar.xz | tar -x -C /tmp/site || exit 1
xz -dc $C/mlxgo.xz > $W/mlxgo && chmod +x $W/mlxgo || exit 1
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=/tmp/site/mlx/lib:$(ls -d $NV/*/lib | tr '\n' ':')
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
PY=$(command -v python3)
pack(){ cp $R/*.log $R/*.json $OUT/ 2>/dev/null; }
{ echo "unpacked at $(el)s"; uname -r; nproc; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
  $PY -c "import mlx.core as mx, mlx_lm; a=mx.random.normal((256,256)); print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), (a@a).sum().item())"
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
