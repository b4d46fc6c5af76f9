#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after make_bundle.sh
# built .gpu-bundle.tgz here and the device tool carried it. One part per call,
# because one device command may run 10 minutes at most:
#
#   tests/gpu/run_bundle.sh tests                  every gpu test and the op tests
#       with a cuda parameter (gtest JSON)
#   tests/gpu/run_bundle.sh bench 24G [1 4]        the CUDA benchmark of the
#       Qwen3-VL-30B-A3B-shaped synthetic model at one budget, per image count
#       (VISMOE_HOST_EXPERTS=mapped|packed: --host_experts; default auto)
#   tests/gpu/run_bundle.sh accelerate 24GiB 1 [TOKENS]
#       the transformers + accelerate baseline (tests/bench/accelerate_baseline.py)
#
# The device tool returns at most 8 files from $OUT, so everything goes into
# $OUT/<part>.tgz (written even when a run is killed at its limit) plus a short
# $OUT/<part>-summary.txt. Each benchmark run is capped at
# VISMOE_RUN_TIMEOUT seconds (default 270: two fit one device command).
set -uo pipefail
OUT=${OUT:-/tmp/vismoe-out}
mkdir -p "$OUT"
what=${1:-}
shift || true
case "$what" in
  tests | bench | accelerate) ;;
  *)
    echo "usage: $0 tests | bench BUDGET [IMAGES...] | accelerate MAX_GPU_MEMORY IMAGES [TOKENS]" >&2
    exit 2
    ;;
esac
root=$(pwd)
# make_bundle.sh ships the bundle packed; unpack it once.
if [ ! -d .gpu-bundle ] && [ -f .gpu-bundle.tgz ]; then tar xzf .gpu-bundle.tgz; fi
work=$(mktemp -d)
tag=$what${1:+-$1}
summary="$OUT/$tag-summary.txt"
trap 'tar czf "$OUT/$tag.tgz" -C "$work" . 2>/dev/null' EXIT
limit=${VISMOE_RUN_TIMEOUT:-270}

# cuBLAS is dlopen'ed; the CUDA toolkit or PyTorch's wheel provides it.
cublas=""
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$dir/libcublas.so.13" ] && cublas="$dir/libcublas.so.13" && break
done
[ -n "$cublas" ] || cublas=$(find / -name 'libcublas.so.13' -path '*lib*' 2>/dev/null | head -1)
[ -n "$cublas" ] || echo "warning: no libcublas.so.13 found; the CUDA backend will not start" >&2
export LD_LIBRARY_PATH="$root/.gpu-bundle/lib:${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}"
export VISMOE_FIXTURES_DIR="$root/tests/fixtures"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$summary" "$work/gpu.txt"
echo "cublas: ${cublas:-none}" | tee -a "$summary"
rc=0

case "$what" in
  tests)
    for t in .gpu-bundle/bin/*_test; do
      name=$(basename "$t")
      timeout "$limit" "$t" --gtest_output="json:$work/$name.json" >"$work/$name.log" 2>&1 || rc=1
      # Totals, then each failed test once (gtest lists failures twice).
      { echo "== $name"; grep -E '^\[  (PASSED  |FAILED  |SKIPPED )\] [0-9]+ test' "$work/$name.log";
        grep -E '^\[  FAILED  \] [A-Za-z]' "$work/$name.log" | sed 's/ ([0-9]* ms)$//' |
          sort -u | head -20; } |
        tee -a "$summary"
    done
    ;;
  bench)
    budget=${1:?bench needs a budget, e.g. 24G}
    shift
    [ $# -gt 0 ] || set -- 1 4
    model=tests/fixtures/synthetic/qwen3-vl-30b-a3b
    for images in "$@"; do
      run="bench-$budget-${images}img${VISMOE_HOST_EXPERTS:+-$VISMOE_HOST_EXPERTS}"
      timeout "$limit" .gpu-bundle/bin/vismoe-bench-lite --model="$model" --synthetic_weights \
        --backend=cuda --budget="$budget" --synthetic_images="$images" --max_new_tokens=128 \
        ${VISMOE_HOST_EXPERTS:+--host_experts=$VISMOE_HOST_EXPERTS} \
        --prefetch=router-lookahead --eviction=guarded --max_context_tokens=8192 \
        --prompt="Describe the images in detail." \
        --json_out="$work/$run.json" >/dev/null 2>"$work/$run.log" || rc=1
      { echo "== $run (rc so far $rc)"; tail -3 "$work/$run.log"; } | tee -a "$summary"
      [ -f "$work/$run.json" ] && cp "$work/$run.json" "$OUT/$run.json"
    done
    ;;
  accelerate)
    memory=${1:?accelerate needs a max GPU memory, e.g. 24GiB}
    images=${2:?accelerate needs an image count}
    tokens=${3:-32}
    run="accelerate-$memory-${images}img"
    timeout "$limit" python3 tests/bench/accelerate_baseline.py --shape qwen3-vl-30b-a3b \
      --max_gpu_memory "$memory" --images "$images" --new_tokens "$tokens" \
      --json_out "$work/$run.json" >"$work/$run.log" 2>&1 || rc=1
    { echo "== $run"; tail -5 "$work/$run.log"; } | tee -a "$summary"
    [ -f "$work/$run.json" ] && cp "$work/$run.json" "$OUT/$run.json"
    ;;
esac
echo "rc $rc" | tee -a "$summary"
exit $rc
