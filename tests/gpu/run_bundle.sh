#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after make_bundle.sh
# built .gpu-bundle here and the device tool carried it: every gpu test
# (gtest JSON into $OUT), then the CUDA benchmark of the Qwen3-VL-30B-A3B-shaped
# synthetic model at the issue's budgets (24 GB, 40 GB) with 1 and 4 images
# and 128 decoded tokens (JSON into $OUT). Pass "tests" or "bench" to run one part.
set -uo pipefail
OUT=${OUT:-/tmp/vismoe-out}
mkdir -p "$OUT"
what=${1:-all}
root=$(pwd)
cublas=$(find / -name 'libcublas.so.13' -path '*lib*' 2>/dev/null | head -1)
[ -n "$cublas" ] || echo "warning: no libcublas.so.13 found; the CUDA backend will not start" >&2
export LD_LIBRARY_PATH="$root/.gpu-bundle/lib:${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}"
export VISMOE_FIXTURES_DIR="$root/tests/fixtures"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
rc=0
if [ "$what" = all ] || [ "$what" = tests ]; then
  for t in .gpu-bundle/bin/*_gpu_test; do
    name=$(basename "$t")
    "$t" --gtest_output="json:$OUT/$name.json" >"$OUT/$name.log" 2>&1 || rc=1
    tail -3 "$OUT/$name.log"
  done
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  model=tests/fixtures/synthetic/qwen3-vl-30b-a3b
  for budget in 24G 40G; do
    for images in 1 4; do
      .gpu-bundle/bin/vismoe-bench-lite --model="$model" --synthetic_weights --backend=cuda \
        --budget="$budget" --synthetic_images="$images" --max_new_tokens=128 \
        --prefetch=router-lookahead --eviction=guarded --max_context_tokens=8192 \
        --prompt="Describe the images in detail." \
        --json_out="$OUT/bench-$budget-${images}img.json" >/dev/null \
        2>"$OUT/bench-$budget-${images}img.log" || rc=1
      tail -2 "$OUT/bench-$budget-${images}img.log"
    done
  done
fi
exit $rc
