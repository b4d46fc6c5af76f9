#!/usr/bin/env bash
# Continuous batching under load (issue #18): vismoe-load's synthetic image+text
# set against a vismoe-server with batching off (--workers=1: one request per
# forward step) and on (--workers=32), closed loop at concurrency 1, 4, 16 and
# 32. Same model, budget, KV pool and step size in every run; prints one
# table row per run and keeps each JSON report.
# Usage: tests/bench/batching_load.sh [BUILD_DIR] [OUT_DIR]
# Env: MODEL (config dir), SYNTHETIC (1: --synthetic_weights; 0: the model's
# own weights, e.g. tests/fixtures/vqa-qwen3-vl-moe), REQUESTS per run, NEW
# tokens per request, BUDGET (0 = every expert resident), KV_TOKENS (the KV
# pool, inside the budget), THREADS (engine threads), REQUEST_FILE (a
# vismoe-load JSONL request set instead of the synthetic one, e.g. the trained
# model's tests/fixtures/vqa-eval/calibration.jsonl).
set -euo pipefail
BUILD=${1:-build/release}
OUT=${2:-/tmp/vismoe-batching-load}
MODEL=${MODEL:-tests/fixtures/synthetic/qwen3-vl-mid}
REQUESTS=${REQUESTS:-48}
NEW=${NEW:-16}
BUDGET=${BUDGET:-192M}  # 128 MiB of it is qwen3-vl-mid's KV pool of 16,384 tokens
KV_TOKENS=${KV_TOKENS:-16384}
SYNTHETIC=${SYNTHETIC:-1}
THREADS=${THREADS:-2}
REQUEST_FILE=${REQUEST_FILE:-}
weights=()
[[ $SYNTHETIC == 1 ]] && weights=(--synthetic_weights)
request_set=(--synthetic)
[[ -n $REQUEST_FILE ]] && request_set=(--request_file="$REQUEST_FILE")
mkdir -p "$OUT"

start_server() {  # $1 = workers, $2 = port
  "$BUILD/server/vismoe-server" --model="$MODEL" "${weights[@]}" --backend=cpu \
    --engine_threads="$THREADS" --gpu_memory_budget="$BUDGET" --pinned_layers=1 \
    --max_context_tokens=1024 --kv_cache_tokens="$KV_TOKENS" --max_step_tokens=2048 \
    --workers="$1" --max_queue=64 --listen="127.0.0.1:$2" --metrics_listen= \
    >"$OUT/server-w$1.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    if "$BUILD/client/vismoe-cli" health --server="127.0.0.1:$2" >/dev/null 2>&1; then return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$OUT/server-w$1.log"; return 1; }
    sleep 0.2
  done
  echo "server did not become healthy" >&2
  return 1
}

echo "| workers | concurrency | requests/s | output tokens/s | TTFT p50 / p99 s | TPOT p50 / p99 s | E2E p50 / p99 s | expert MB copied / output token | failed |"
echo "|---|---|---|---|---|---|---|---|---|"
# Both servers up at once (an idle one costs no CPU), runs interleaved per
# concurrency so that a change in the machine's load hits both settings alike.
declare -A PORT PID
trap 'kill ${PID[@]} 2>/dev/null || true' EXIT
for workers in 1 32; do
  PORT[$workers]=$((20000 + RANDOM % 20000))
  start_server "$workers" "${PORT[$workers]}"
  PID[$workers]=$SERVER_PID
done
for conc in 1 4 16 32; do
  for workers in 1 32; do
    report="$OUT/load-w${workers}-c${conc}.json"
    "$BUILD/client/vismoe-load" --server="127.0.0.1:${PORT[$workers]}" "${request_set[@]}" \
      --requests="$REQUESTS" --concurrency="$conc" --max_new_tokens="$NEW" \
      --json_report="$report" >/dev/null 2>&1
    python3 - "$report" "$workers" "$conc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t, lat, srv = r["throughput"], r["latency_seconds"], r["server"]
mb_per_token = srv["bytes_h2d"] / max(t["completion_tokens"], 1) / 1e6
print(f"| {sys.argv[2]} | {sys.argv[3]} | {t['requests_per_second']:.2f} | "
      f"{t['output_tokens_per_second']:.1f} | {lat['ttft']['p50']:.2f} / {lat['ttft']['p99']:.2f} | "
      f"{lat['tpot']['p50']:.3f} / {lat['tpot']['p99']:.3f} | "
      f"{lat['e2e']['p50']:.2f} / {lat['e2e']['p99']:.2f} | {mb_per_token:.1f} | "
      f"{r['requests']['failed']} |")
PY
  done
done
