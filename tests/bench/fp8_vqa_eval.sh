#!/usr/bin/env bash
# --expert_dtype=fp8 against the checkpoint's bf16 experts on the trained VQA models' 639-question
# eval set (tests/fixtures/vqa-eval/eval.jsonl): accuracy, and expert bytes copied per generated
# token under the same offload budget (the exact path otherwise; CPU backend).
#   tests/bench/fp8_vqa_eval.sh [OUTDIR]      (BIN=dir holding vismoe-server / vismoe-eval /
#   vismoe-cli, default the release build; BUDGET default 12MB, PINNED default 1)
# Prints one line per model and dtype and writes OUTDIR/fp8_vqa_eval.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-/tmp/fp8-vqa}"; mkdir -p "$out"
S="${BIN:-build/release/server}/vismoe-server"; E="${BIN:-build/release/client}/vismoe-eval"
C="${BIN:-build/release/client}/vismoe-cli"
budget="${BUDGET:-12MB}"; pinned="${PINNED:-1}"
metric() { curl -s "http://127.0.0.1:50252/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
rows=()
for model in vqa-qwen3-vl-moe vqa-direct-qwen3-vl-moe; do
  for dtype in auto fp8; do
    tag="$model.$dtype"
    "$S" --model=tests/fixtures/$model --backend=cpu --expert_dtype=$dtype --gpu_memory_budget=$budget \
      --pinned_layers=$pinned --max_context_tokens=1024 --listen=127.0.0.1:50251 \
      --metrics_listen=127.0.0.1:50252 >"$out/$tag.server.log" 2>&1 &
    pid=$!
    for _ in $(seq 150); do "$C" health --server=127.0.0.1:50251 >/dev/null 2>&1 && break; sleep 0.2; done
    "$E" --server=127.0.0.1:50251 --data=tests/fixtures/vqa-eval/eval.jsonl --concurrency=1 \
      --json_report="$out/$tag.json" >"$out/$tag.eval.txt"
    bytes=$(metric vismoe_expert_bytes_h2d_total); tokens=$(metric vismoe_generated_tokens_total)
    kill $pid; wait $pid 2>/dev/null || true
    acc=$(python3 -c "import json; s=json.load(open('$out/$tag.json'))['overall']; print(s['correct'], s['total'])")
    read -r correct total <<<"$acc"
    line=$(python3 -c "print(f'$model $dtype: {$correct}/{$total} = {100*$correct/$total:.1f}%, ' \
      f'{$bytes/$tokens/1e6:.3f} MB expert copies per generated token ({$tokens:.0f} tokens)')")
    echo "$line"
    rows+=("{\"model\": \"$model\", \"expert_dtype\": \"$dtype\", \"correct\": $correct, \"total\": $total, \"bytes_h2d\": $bytes, \"generated_tokens\": $tokens}")
  done
done
(IFS=,; echo "{\"budget\": \"$budget\", \"pinned_layers\": $pinned, \"runs\": [${rows[*]}]}") >"$out/fp8_vqa_eval.json"
