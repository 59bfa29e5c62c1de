#!/bin/bash
# H200: LoRA training tokens/s and peak memory of the Go MLX backend (MLX-CUDA) against mlx_lm.lora,
# with and without --grad-checkpoint (bench/lora.py), after one warm-up pass that fills MLX's
# kernel cache. Needs only .whl/carry (the slimmed mlx/mlx-cuda/mlx-lm site and the mlxgo binary
# built with -tags mlx, as for run-batch.sh) and the working tree (bench/lora.py, train/testdata).
# With .whl/carry/smollm2.tar.xz (the SmolLM2 MLX directory: `tar -C .venv/smollm2 -cf -
# SmolLM2-135M-Instruct-Q4_1-mlx | xz -9`; the carry then needs conformance/testdata and
# bench/results out of the index, see README.md) it runs on the real checkpoint with
# train/testdata/instruct and --mask-prompt, then the README's 50-step fine-tuning run on the MLX
# backend. Without it, `mlxgo synth` writes a checkpoint with SmolLM2's exact shapes and
# quantization layout (8-bit embedding, 4-bit group 32, float16) and a word-level tokenizer without
# a chat template, so the data is train/testdata/instruct as {"text"} lines (no 50-step run).
set -u
. bench/h200/setup.sh
REPS=${REPS:-2}; ITERS=${ITERS:-20}; REPORT=${REPORT:-10}; ENGINES=${ENGINES:-mlxgo-mlx,mlx_lm}
BATCH=${BATCH:-4}; LAYERS=${LAYERS:-8}
{ echo "unpacked at $(el)s"; uname -r; nproc; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv
  $PY -c "import mlx.core as mx, mlx_lm, mlx_lm.lora, yaml; a=mx.random.normal((256,256)); print('mlx', mx.__version__, 'mlx_lm', mlx_lm.__version__, mx.default_device(), (a@a).sum().item())"
  if [ -f $C/smollm2.tar.xz ]; then
    mkdir -p /tmp/real && xz -dc $C/smollm2.tar.xz | tar -x -C /tmp/real || exit 1
    echo "real SmolLM2: $(ls /tmp/real/*)"
  else
    $W/mlxgo synth --preset smollm2-135m --embed-bits 8 --dtype f16 --quant q4g32 --out /tmp/smol || exit 1
    # TOKENIZER: a directory with SmolLM2's tokenizer.json and tokenizer_config.json (mlxgo
    # reads BPE tokenizers only, not synth's word-level one); the vocabulary sizes agree.
    if [ -n "${TOKENIZER:-}" ]; then cp $TOKENIZER/tokenizer*.json /tmp/smol/ || exit 1; fi
    mkdir -p /tmp/data
    for s in train valid test; do
      $PY -c "import json,sys; [print(json.dumps({'text': (d:=json.loads(l))['prompt'] + ' ' + d['completion']})) for l in sys.stdin]" \
        < train/testdata/instruct/$s.jsonl > /tmp/data/$s.jsonl || exit 1
    done
  fi; } > $R/env.log 2>&1 || { cat $R/env.log; pack; exit 1; }
tail -4 $R/env.log
if [ -f $C/smollm2.tar.xz ]; then
  M=/tmp/real/SmolLM2-135M-Instruct-Q4_1-mlx; D="--data train/testdata/instruct --mask-prompt"
else
  M=/tmp/smol; D="--data /tmp/data"
fi
A="--mlxgo $W/mlxgo --python $PY --model $M $D --engines $ENGINES --batch-size $BATCH --num-layers $LAYERS --workdir $W/bench"
echo "== warm-up at $(el)s"
$PY bench/lora.py $A --iters 4 --report 2 --reps 1 --label h200-warmup --results $R/warmup > $R/warmup.log 2>&1
tail -8 $R/warmup.log
echo "== runs at $(el)s"
$PY bench/lora.py $A --iters $ITERS --report $REPORT --reps $REPS --label h200-mlx-cuda --results $R > $R/runs.log 2>&1; echo "rc $?" >> $R/runs.log
cat $R/runs.log | grep -v "^== \|^   exit" | tail -12
if [ -f $C/smollm2.tar.xz ]; then
  echo "== the README's 50-step run on the MLX backend at $(el)s"
  $W/mlxgo lora --backend mlx --model $M --train --data train/testdata/instruct --iters 50 --batch-size 4 --num-layers 8 \
    --learning-rate 1e-4 --steps-per-report 10 --steps-per-eval 10 --val-batches -1 --mask-prompt --adapter-path /tmp/smol50-mlx --test \
    > $R/lora50-mlx.log 2>&1; echo "rc $?" >> $R/lora50-mlx.log
  grep -E "^Iter|^Test|^Saved|^rc" $R/lora50-mlx.log
fi
echo "== end at $(el)s"; pack; ls $R
