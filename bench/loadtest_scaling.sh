#!/bin/bash
# The server's scaling target (issue 15): aggregate completion tok/s of 8 concurrent clients
# against 1, per model, measured by mlxgo loadtest (in-process server on a loopback port, cpu
# backend) in PASSES alternating passes, each pass running 1 client then 8 for each model,
# both on the same REQUESTS requests (loadtest's i-th request is the same whatever the number of
# clients), so that the two throughputs are of the same work.
# Every request streams (so that the steady throughput counts exactly); nothing is cancelled or
# malformed; the prompt cache is off (so that each request pays its prompt), per-row batch
# caches (the cpu default); one warm-up request before each run (--warmup 1: a fresh server's first
# request packs the weights, once, which would otherwise count in each run's throughput).
# Prints the loadtest lines per run, then one line per model and
# pass with the ratios of both throughputs: the whole run's, and the steady one's (while every
# client still had a request to send, before the tail where fewer clients remain), and last
# each model's median ratios over the passes.
#
#   bench/loadtest_scaling.sh [MODEL_DIR ...]      (make loadtest-scaling)
#
# Environment: MLXGO (default: go run ./cmd/mlxgo), TOKENS (--tokens, default 256: each request
# asks for a quarter to all of it), REQUESTS (32 a run), PASSES (3), PRECISION (fast), DURATION
# (--duration, default 10m: long enough for one client to finish every request of a 1B model;
# until 2026-12-05 23:15 loadtest's 2m default cut MiniCPM5-1B's one-client runs after 28-29 of
# 32), FLAGS (more loadtest flags),
# PEER_URL (a server already running, for example llama-server with --parallel 8: each pass
# also loads it with the same 1 and 8 clients, through loadtest --url; the prompt cache is the
# peer's own).
set -eu
MLXGO=${MLXGO:-go run ./cmd/mlxgo}
TOKENS=${TOKENS:-256}; REQUESTS=${REQUESTS:-32}; PASSES=${PASSES:-3}; PRECISION=${PRECISION:-fast}; DURATION=${DURATION:-10m}; FLAGS=${FLAGS:-}
case "${1:-}" in -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
PEER_URL=${PEER_URL:-}
[ $# -gt 0 ] || [ -n "$PEER_URL" ] || { echo "usage: $0 MODEL_DIR ... (--help for more)" >&2; exit 2; }
for v in TOKENS REQUESTS PASSES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$0: $v=${!v}: want a positive integer" >&2; exit 2; }
done
for m in "$@"; do
  [ -f "$m/config.json" ] || { echo "$0: $m/config.json: no such file (want an MLX checkpoint directory)" >&2; exit 2; }
done
summary=()
for pass in $(seq 1 "$PASSES"); do
  for m in "$@" ${PEER_URL:+"$PEER_URL"}; do
    declare -A tps=() sps=()
    for c in 1 8; do
      r=$REQUESTS
      echo "=== pass $pass $(date -u +%T) $m tokens $TOKENS clients $c requests $r"
      load=(loadtest --warmup 1 --cancel 0 --malformed 0 --slow 0 --stream 1 --prompt-words 16 --tokens "$TOKENS" --clients $c --requests $r --duration "$DURATION")
      if [ "$m" = "$PEER_URL" ]; then
        load+=(--url "$m")
      else
        load+=(--model "$m" --backend cpu --precision "$PRECISION" --max-concurrency 8 --prompt-cache-bytes 0 $FLAGS)
      fi
      if ! out=$($MLXGO "${load[@]}" 2>&1); then
        # A peer's errors are its own: shown, and its throughput still counted; mlxgo serve
        # must have none. (A request the server dropped by closing its kept-alive connection
        # unanswered, as llama-server does now and then, is sent again: loadtest's "resent" line.)
        [ "$m" = "$PEER_URL" ] && echo "$out" | grep -q '^throughput: ' \
          || { echo "$out" >&2; echo "$0: mlxgo loadtest failed on $m with $c clients" >&2; exit 1; }
        echo "$out" | grep -E '^(  error: |mlxgo loadtest: FAIL)' | head -3
      fi
      echo "$out" | grep -E "^(requests|resent|throughput|steady throughput|prompts|time to first|inter-token|engine)"
      tps[$c]=$(echo "$out" | sed -n 's/^throughput: .* = \([0-9.]*\) tok\/s aggregate$/\1/p')
      sps[$c]=$(echo "$out" | sed -n 's/^steady throughput: .* = \([0-9.]*\) tok\/s$/\1/p')
      [ -n "${tps[$c]}" ] && [ -n "${sps[$c]}" ] || { echo "$out" >&2; echo "$0: no throughput lines from mlxgo loadtest" >&2; exit 1; }
    done
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b / a }'; }
    summary+=("$(printf '%s pass %d: whole run 1 client %s tok/s, 8 clients %s tok/s, %s×; steady 1 client %s tok/s, 8 clients %s tok/s, %s×' \
      "$m" "$pass" "${tps[1]}" "${tps[8]}" "$(ratio "${tps[1]}" "${tps[8]}")" "${sps[1]}" "${sps[8]}" "$(ratio "${sps[1]}" "${sps[8]}")")")
  done
done
echo "=== 8 clients against 1 (tokens $TOKENS, precision $PRECISION)"
printf '%s\n' "${summary[@]}"
# The median of the passes' ratios, per model (the middle one, or the mean of the middle two).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.2f", v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "=== medians over $PASSES passes"
for m in "$@" ${PEER_URL:+"$PEER_URL"}; do
  lines=$(printf '%s\n' "${summary[@]}" | awk -v p="$m pass " 'index($0, p) == 1')
  echo "$m: whole run $(echo "$lines" | sed -E 's/.* ([0-9.]+)×; steady .*/\1/' | median)×, steady $(echo "$lines" | sed -E 's/.* ([0-9.]+)×$/\1/' | median)×"
done
