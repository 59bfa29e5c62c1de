#!/bin/bash
# H200: batch sweep of the Go MLX backend (mlx-gpu) against mlx_lm's BatchGenerator, after one warm-up process.
set -u
. bench/h200/setup.sh
REPS=${REPS:-5}; NPAIR=${NPAIR:-2}; DEADLINE=${DEADLINE:-470}; SIZES=${SIZES:-1,2,4,8,16}; DEC=${DEC:-128}
{ envinfo
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
