#!/bin/sh
# bench/trainmem.sh: the peak memory of one LoRA training step (issue 18),
# as each trainer reports it ("Peak mem" of its progress line), for one
# sequence of each length in LENGTHS on MODEL, every layer adapted, batch 1:
#
#   cpu:plain  mlxgo lora on the CPU backend, the plain backward (its peak
#              counts the arrays the backend tracks; the weights are mapped)
#   cpu:ckpt   the same with --grad-checkpoint
#   cpu:seg    the same with --segment-layers $SEG (loss chunks by default)
#   mlx:*      the same three on the MLX backend (MLX's allocator peak,
#              mx.get_peak_memory, weights included)
#   mlx_lm:plain, mlx_lm:ckpt   mlx_lm.lora itself (MLX's CPU device on
#              Linux), without and with --grad-checkpoint
#
# Run from the repository root; one run at a time, each a fresh process.
# Prints one line per run: tokens, configuration, peak GB, seconds. MLXGO
# names a prebuilt mlxgo (built with -tags mlx it has both backends)
# instead of building one; PY the Python with mlx_lm. The text is words
# "t0".."t49151" (mlxgo synth's tokenizer reads them as those ids).
#   sh bench/trainmem.sh
#   LENGTHS="512" CONFIGS="cpu:plain cpu:seg" sh bench/trainmem.sh
#
# The 2k and 4k runs need more memory and cores than a small machine has
# (the plain CPU backward at 4k tokens is estimated at about 24 GB). A way
# to run them on the lent H200 machine (16 cores, 128 GiB; not yet tried:
# the device tool carries only the session's own checkout), from that
# checkout, whose tmp/ git ignores:
#   mkdir -p tmp/dev/tok && go build -tags mlx -ldflags "-s -w" -o tmp/dev/mlxgo ./cmd/mlxgo
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_35_x86_64 -d tmp/dev \
#     mlx==0.32.4 mlx-cpu==0.32.4 mlx-lm==0.32.2
#   cp .venv/smollm2/SmolLM2-135M-Instruct-Q4_1-mlx/tokenizer*.json tmp/dev/tok/
# and there (carry tmp/dev; the real model is too large to carry, synth
# writes its shapes and layout, and the real tokenizer reads the text):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site tmp/dev/*.whl
#   export PYTHONPATH=/tmp/site LD_LIBRARY_PATH=/tmp/site/mlx/lib:/tmp/site/mlx_cpu.libs
#   tmp/dev/mlxgo synth --preset smollm2-135m --quant q4g32 --embed-bits 8 --dtype f16 --out /tmp/smol
#   cp tmp/dev/tok/* /tmp/smol/
#   MODEL=/tmp/smol MLXGO=tmp/dev/mlxgo PY=python3 sh bench/trainmem.sh
set -eu
MODEL=${MODEL:-.venv/smollm2/SmolLM2-135M-Instruct-Q4_1-mlx}
LENGTHS=${LENGTHS:-"512 2048 4096"}
CONFIGS=${CONFIGS:-"cpu:plain cpu:ckpt cpu:seg mlx:plain mlx:ckpt mlx:seg mlx_lm:plain mlx_lm:ckpt"}
SEG=${SEG:-1}
PY=${PY:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${MLXGO:-}" ]; then
	ln -s "$(realpath "$MLXGO")" "$tmp/mlxgo-cpu"
	ln -s "$(realpath "$MLXGO")" "$tmp/mlxgo-mlx"
else
	go build -o "$tmp/mlxgo-cpu" ./cmd/mlxgo
	case "$CONFIGS" in *mlx:*) go build -tags mlx -o "$tmp/mlxgo-mlx" ./cmd/mlxgo ;; esac
fi
mkdir "$tmp/data"
# One text of 6,000 words (more tokens than the longest length: the
# trainers truncate it to --max-seq-length, with a warning).
"$PY" - "$tmp/data/train.jsonl" <<'EOF'
import json, random, sys
r = random.Random(0)
json.dump({"text": " ".join("t%d" % r.randrange(49152) for _ in range(6000))}, open(sys.argv[1], "w"))
EOF
for n in $LENGTHS; do
	for c in $CONFIGS; do
		common="--train --data $tmp/data --iters 1 --batch-size 1 --num-layers -1 --max-seq-length $n --steps-per-report 1 --save-every 1000 --adapter-path $tmp/adapters"
		case $c in
		cpu:plain) cmd="$tmp/mlxgo-cpu lora --backend cpu --model $MODEL $common" ;;
		cpu:ckpt) cmd="$tmp/mlxgo-cpu lora --backend cpu --model $MODEL $common --grad-checkpoint" ;;
		cpu:seg) cmd="$tmp/mlxgo-cpu lora --backend cpu --model $MODEL $common --segment-layers $SEG" ;;
		mlx:plain) cmd="$tmp/mlxgo-mlx lora --backend mlx --model $MODEL $common" ;;
		mlx:ckpt) cmd="$tmp/mlxgo-mlx lora --backend mlx --model $MODEL $common --grad-checkpoint" ;;
		mlx:seg) cmd="$tmp/mlxgo-mlx lora --backend mlx --model $MODEL $common --segment-layers $SEG" ;;
		mlx_lm:plain) cmd="$PY bench/trainmem_mlx_lm.py --model $MODEL $common" ;;
		mlx_lm:ckpt) cmd="$PY bench/trainmem_mlx_lm.py --model $MODEL $common --grad-checkpoint" ;;
		*) echo "trainmem: unknown configuration $c" >&2; exit 2 ;;
		esac
		start=$(date +%s)
		if ! $cmd >"$tmp/log" 2>&1; then
			echo "$n $c failed $(($(date +%s) - start)) s:"
			tail -5 "$tmp/log"
			continue
		fi
		peak=$(sed -n 's/.*Peak mem \([0-9.]*\) GB.*/\1/p' "$tmp/log" | tail -1)
		echo "$n $c ${peak:-?} GB $(($(date +%s) - start)) s"
	done
done
