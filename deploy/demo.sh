#!/usr/bin/env bash
# README command 1: build, start vismoe-server on the bundled trained Qwen3-VL-MoE benchmark model
# (tests/fixtures/vqa-direct-qwen3-vl-moe: 6 MoE layers, 32 experts top-4, trained on 128x128 pictures
# of shapes and printed words by tests/fixtures/vqa/train_direct.sh; CPU backend unless a GPU is usable), send one of its eval pictures
# (tests/fixtures/vqa-eval/img/0000.png, made by tests/fixtures/vqa/make_vqa_data.py: a yellow
# triangle and a red cross) with an eval question in the eval's prompt format through the bundled
# client, print the streamed answer ("a yellow triangle and a red cross") and the request's stats,
# then stop the server. The server runs under a device-memory budget that holds one pinned MoE
# layer and a 25-slab expert cache (of the 160 slabs of the 5 offloaded layers), with a throttled
# copy engine, so the stats show real cache misses, prefetch, Hot Recall and bytes moved. It runs
# the exact path (no token compression): on this model the compressors cost 0.8 to 28 points of
# accuracy (engine/policy/README.md, "Measured on the single-run VQA model"); add e.g.
# --token_compressor=saliency --keep_ratio=0.75 to model_args to see pruning.
#   deploy/demo.sh                      uses build/release
#   VISMOE_MODEL=/path/to/checkpoint deploy/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
if [[ ! -x build/release/server/vismoe-server || ! -x build/release/client/vismoe-cli ]]; then
  cmake --preset release
fi
cmake --build --preset release -j "$(nproc)" --target vismoe-server vismoe-cli

port="${VISMOE_DEMO_PORT:-50051}"
metrics_port="${VISMOE_DEMO_METRICS_PORT:-9464}"
model_args=(--model=tests/fixtures/vqa-direct-qwen3-vl-moe --gpu_memory_budget=12MB
  --max_context_tokens=1024 --pinned_layers=1 --copy_bandwidth=200MB)
if [[ -n "${VISMOE_MODEL:-}" ]]; then model_args=(--model="$VISMOE_MODEL"); fi
log="$(mktemp -t vismoe-demo.XXXXXX.log)"
build/release/server/vismoe-server "${model_args[@]}" --listen="127.0.0.1:${port}" \
  --metrics_listen="127.0.0.1:${metrics_port}" >"$log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true' EXIT

echo "waiting for vismoe-server on 127.0.0.1:${port} (log: $log) ..."
for _ in $(seq 1 120); do
  if build/release/client/vismoe-cli health --server="127.0.0.1:${port}" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "vismoe-server exited; its log:"; cat "$log"; exit 1
  fi
  sleep 0.5
done

build/release/client/vismoe-cli --server="127.0.0.1:${port}" \
  --image=tests/fixtures/vqa-eval/img/0000.png \
  --prompt=$'Describe the shapes in the picture.\nAnswer the question using a single word or phrase.' \
  --max_new_tokens=24

echo
echo "metrics (first lines of http://127.0.0.1:${metrics_port}/metrics):"
if command -v curl >/dev/null; then
    curl -s "http://127.0.0.1:${metrics_port}/metrics" |
    grep -E '^vismoe_(requests_total\{status="ok"\}|expert_cache_hit_ratio|prefetch_recall |expert_bytes_h2d_total|visual_tokens_pruned_total|gpu_memory_bytes)' || true
fi
