#!/bin/bash
# bench/lora.sh: training tokens/s and peak memory of `mlxgo lora` (cpu and mlx backends) against
# `mlx_lm.lora`, with and without --grad-checkpoint, on the same checkpoint, data and flags
# (bench/lora.py says how; it writes bench/results/<UTC>-<label>-lora.{json,md}).
#
#   bench/lora.sh                              # SmolLM2 (make smollm2), train/testdata/instruct
#   MLXGO=/path/mlxgo bench/lora.sh --reps 2   # a prebuilt binary (with -tags mlx); extra flags go to lora.py
#
# MODEL, DATA, PY (the Python with mlx and mlx_lm) and LABEL override the defaults.
set -eu
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-.venv/smollm2/SmolLM2-135M-Instruct-Q4_1-mlx}
DATA=${DATA:-train/testdata/instruct}
LABEL=${LABEL:-vm}
if [ -z "${MLXGO:-}" ]; then
	MLXGO=$(mktemp -d)/mlxgo
	go build -tags mlx -o "$MLXGO" ./cmd/mlxgo
fi
exec "$PY" bench/lora.py --mlxgo "$MLXGO" --python "$PY" --model "$MODEL" --data "$DATA" --label "$LABEL" --mask-prompt "$@"
