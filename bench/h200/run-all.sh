#!/bin/bash
# H200: the open measurements in one call, in priority order (STEPS, default "lora context":
# what is still open after 2026-12-03; orpo, batch and qprobe ran then), each step's files copied to $OUT as it ends. No step has
# a timeout of its own (MLX-CUDA compiles its kernels on first use, for minutes, and a short
# timeout kills a step before it prints): each gets what is left of DEADLINE (default 560 s
# from the start), and a step starts only with at least MIN (60) s left.
#   orpo     BenchmarkORPOStep on MLX (train.test from the carry): prefix-shared with the blocked
#            attention, two forwards, and the dense mask (MODES), at PROMPTS (1024,2048,256),
#            ORPO_N timed steps after one untimed, on ORPO_MODEL (default /tmp/smol, the SmolLM2
#            shapes; /tmp/synth is the MiniCPM5-1B shape) (issue 18)
#   lora     bench/lora.py: the Go MLX backend against mlx_lm.lora, with and without
#            --grad-checkpoint, REPS alternating repetitions of ITERS steps (issue 17)
#   batch    the batch sweep, mlx-gpu against mlx_lm's BatchGenerator at SIZES (1,8) (issue 14)
#   qprobe   the quantized KV cache on both engines at one short context, stderr kept (issue 16)
#   context  the context sweep, full cache, mlx-gpu against mlx_lm at CONTEXTS (issue 16)
set -u
. bench/h200/setup.sh
DEADLINE=${DEADLINE:-560}; MIN=${MIN:-60}; STEPS=${STEPS:-lora context}
left(){ echo $(( DEADLINE - $(el) )); }
xz -dc $C/train.test.xz > $W/train.test && chmod +x $W/train.test || exit 1
{ envinfo
  $W/mlxgo synth --preset smollm2-135m --quant q4g32 --embed-bits 8 --dtype f16 --out /tmp/smol && cp $C/tok/* /tmp/smol/
  $W/mlxgo synth --preset minicpm5-1b --quant optiq --out /tmp/synth; } > $R/env.log 2>&1 || { cat $R/env.log; pack; exit 1; }
tail -2 $R/env.log
for s in $STEPS; do
  if [ $(left) -lt $MIN ]; then echo "== $s skipped at $(el)s: $(left) s left"; continue; fi
  echo "== $s at $(el)s ($(left) s left)"
  case $s in
  orpo)
    (cd train && MLXGO_ORPO_MODEL=${ORPO_MODEL:-/tmp/smol} MLXGO_ORPO_PROMPTS=${PROMPTS:-1024,2048,256} MLXGO_ORPO_MODES=${MODES:-shared,two,shared-array} \
      timeout $(left) $W/train.test -test.run '^$' -test.bench 'ORPOStep/mlx/' -test.benchtime ${ORPO_N:-5}x -test.v) > $R/orpo.log 2>&1
    grep -E 'Benchmark' $R/orpo.log ;;
  lora)
    mkdir -p /tmp/data
    for f in train valid test; do
      $PY -c "import json,sys; [print(json.dumps({'text': (d:=json.loads(l))['prompt'] + ' ' + d['completion']})) for l in sys.stdin]" \
        < train/testdata/instruct/$f.jsonl > /tmp/data/$f.jsonl
    done
    timeout $(left) $PY bench/lora.py --mlxgo $W/mlxgo --python $PY --model /tmp/smol --data /tmp/data --engines mlxgo-mlx,mlx_lm \
      --batch-size 4 --num-layers 8 --workdir $W/bench --iters ${ITERS:-30} --report ${REPORT:-15} --reps ${REPS:-3} \
      --label h200-mlx-cuda --results $R > $R/lora-runs.log 2>&1
    grep -v "^== \|^   exit" $R/lora-runs.log | tail -8 ;;
  batch)
    timeout $(left) $W/mlxgo bench --model /tmp/synth --python $PY --driver bench/mlx_lm_driver.py --batch-sizes ${SIZES:-1,8} --prompt-lens 16 \
      --decode-tokens 128 --configs mlx-gpu,mlx_lm --reps 3 --warmup 1 --results $R > $R/batch.log 2>&1
    grep -E "^\| " $R/batch.log | tail -6 ;;
  qprobe)
    timeout $(left) $W/mlxgo bench --model /tmp/synth --python $PY --driver bench/mlx_lm_driver.py --kv-cache quantized --contexts 256 \
      --context-prefill 64 --decode-tokens 8 --configs mlx-gpu,mlx_lm --reps 1 --warmup 0 --results= > $R/qprobe.log 2>&1
    grep -iE "error|exception|failed" $R/qprobe.log | head -8 ;;
  context)
    timeout $(left) $W/mlxgo bench --model /tmp/synth --python $PY --driver bench/mlx_lm_driver.py --kv-cache full --contexts ${CONTEXTS:-1k,4k,8k,16k,32k} \
      --decode-tokens 32 --configs mlx-gpu,mlx_lm --reps 2 --warmup 1 --results $R > $R/context.log 2>&1
    grep -E "^\| " $R/context.log | tail -8 ;;
  *) echo "unknown step $s" ;;
  esac
  pack
done
echo "== end at $(el)s"; pack
