#!/usr/bin/env bash
# TTFT through the OpenAI-compatible HTTP API (streamed chat completions)
# against gRPC (issue #35: HTTP streaming must add under 5%): one vismoe-server
# serving both, vismoe-load at concurrency 8 on the same request set, the two
# front ends alternating round by round so that the machine's drift hits both
# alike. Writes each round's JSON report and a summary JSON (mean TTFT over
# all requests of each API, p50 of the per-round means, and their ratio).
# Usage: tests/bench/http_vs_grpc_ttft.sh [BUILD_DIR] [OUT_DIR]
# Env: MODEL (default the trained demo model), REQUEST_FILE, ROUNDS,
# REQUESTS per round, CONCURRENCY, THREADS (engine threads).
set -euo pipefail
BUILD=${1:-build/release}
OUT=${2:-/tmp/vismoe-http-vs-grpc}
MODEL=${MODEL:-tests/fixtures/vqa-qwen3-vl-moe}
REQUEST_FILE=${REQUEST_FILE:-tests/fixtures/vqa-eval/calibration.jsonl}
ROUNDS=${ROUNDS:-6}
REQUESTS=${REQUESTS:-72}
CONCURRENCY=${CONCURRENCY:-8}
THREADS=${THREADS:-2}
mkdir -p "$OUT"
grpc_port=$((20000 + RANDOM % 20000))
http_port=$((grpc_port + 1))
"$BUILD/server/vismoe-server" --model="$MODEL" --backend=cpu --engine_threads="$THREADS" \
  --listen="127.0.0.1:$grpc_port" --http_listen="127.0.0.1:$http_port" --metrics_listen= \
  --workers="$CONCURRENCY" --max_context_tokens=512 >"$OUT/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  if "$BUILD/client/vismoe-cli" health --server="127.0.0.1:$grpc_port" >/dev/null 2>&1; then break; fi
  kill -0 "$pid" 2>/dev/null || { cat "$OUT/server.log"; exit 1; }
  sleep 0.2
done
load() {  # $1 = api, $2 = round
  "$BUILD/client/vismoe-load" --api="$1" --server="127.0.0.1:$grpc_port" \
    --http_server="127.0.0.1:$http_port" --request_file="$REQUEST_FILE" \
    --requests="$REQUESTS" --concurrency="$CONCURRENCY" \
    --json_report="$OUT/load-$1-r$2.json" >/dev/null
}
load grpc warmup && load openai warmup
for r in $(seq 1 "$ROUNDS"); do
  if ((r % 2)); then load grpc "$r" && load openai "$r"; else load openai "$r" && load grpc "$r"; fi
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
summary = {}
for api in ("grpc", "openai"):
    reports = [json.load(open(f"{out}/load-{api}-r{r}.json")) for r in range(1, rounds + 1)]
    means = [rep["latency_seconds"]["ttft"]["mean"] for rep in reports]
    summary[api] = {"ttft_mean_per_round": means, "ttft_mean_p50_of_rounds": statistics.median(means),
                    "failed": sum(rep["requests"]["failed"] for rep in reports),
                    "completed": sum(rep["requests"]["completed"] for rep in reports)}
summary["openai_over_grpc_ttft"] = (summary["openai"]["ttft_mean_p50_of_rounds"] /
                                    summary["grpc"]["ttft_mean_p50_of_rounds"])
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
