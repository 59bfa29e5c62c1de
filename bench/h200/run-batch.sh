#!/bin/bash
# H200: batch sweep of the Go MLX backend (mlx-gpu) against mlx_lm's BatchGenerator, after one warm-up process.
set -u
T0=$(date +%s); el(){ echo $(( $(date +%s)-T0 )); }
REPS=${REPS:-5}; NPAIR=${NPAIR:-2}; DEADLINE=${DEADLINE:-470}; SIZES=${SIZES:-1,2,4,8,16}; DEC=${DEC:-128}
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
tail -4 $R/env.log
A="--model /tmp/synth --python $PY --driver bench/mlx_lm_driver.py --batch-sizes $SIZES --prompt-lens 16"
echo "== warm-up at $(el)s"
$W/mlxgo bench $A --decode-tokens 8 --configs mlx-gpu,mlx_lm --reps 1 --warmup 0 --results= > $R/warmup.log 2>&1
grep -E "^\| " $R/warmup.log | head -8
echo "== warm-up done at $(el)s"; pack
for i in $(seq 1 $NPAIR); do
  if [ $(el) -gt $DEADLINE ]; then echo "== stop before pairing $i at $(el)s (deadline)"; break; fi
  if [ $((i%2)) = 1 ]; then CF=mlx-gpu,mlx_lm; else CF=mlx_lm,mlx-gpu; fi
  echo "== pairing $i: $CF, reps $REPS, start $(el)s" | tee -a $R/runs.log
  $W/mlxgo bench $A --decode-tokens $DEC --configs $CF --reps $REPS --warmup 1 --results $R >> $R/runs.log 2>&1; echo "rc $?" >> $R/runs.log
  grep -E "^\| " $R/runs.log | tail -6
  pack
done
echo "== end at $(el)s"; pack; ls $R
