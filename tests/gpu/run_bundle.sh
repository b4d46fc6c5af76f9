#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after make_bundle.sh
# built .gpu-bundle.tgz here and the device tool carried it:
#
#   tests/gpu/run_bundle.sh all                    everything below but `accelerate`, in one
#       device command of about six minutes: tests, vqa, the 30B shape all resident (with
#       and without our GEMV, beside the bundle's baseline build when it has one, and from 1
#       and 8 concurrent streams) and at 24G, profile, and ncu (VISMOE_ALL_NCU=0: not ncu)
#   tests/gpu/run_bundle.sh kernels                the checks of a kernel change in about four
#       minutes: tests, vqa, the 30B shape all resident (beside the base build), streams, ncu30b
#   tests/gpu/run_bundle.sh tests                  every gpu test and the op tests with a
#       cuda parameter (gtest JSON)
#   tests/gpu/run_bundle.sh vqa                    the trained VQA model's 639 eval questions
#       on CUDA, all resident and under a budget that forces misses, each answer compared
#       with transformers' (tests/gpu/vqa_eval.py)
#   tests/gpu/run_bundle.sh bench 24G [1 4]        the CUDA benchmark of the
#       Qwen3-VL-30B-A3B-shaped synthetic model at one budget (0 = all resident), per image
#       count (VISMOE_HOST_EXPERTS=mapped|packed: --host_experts; default auto;
#       VISMOE_SYNTHETIC_ROUTING=realistic: --synthetic_routing;
#       VISMOE_BENCH=base: the baseline build, bin/vismoe-bench-lite-base)
#   tests/gpu/run_bundle.sh streams                batched decode: the 30B shape all resident,
#       one text request from 1 and 8 concurrent streams (--concurrency), the same prompt
#       from every stream and one prompt per stream
#   tests/gpu/run_bundle.sh realistic              the 30B shape with routing-realistic
#       synthetic weights: all resident with --routing_stats (the model's own next-token
#       repeat, reuse distance, LRU/Belady hit ratios), then at 24G and 40G, and at 24G with
#       --expert_dtype=fp8 (about 5 minutes)
#   tests/gpu/run_bundle.sh deepseek               DeepSeek-V2-Lite's shape (synthetic; latent
#       attention, shared experts, 26 x 64 experts) all resident and at 12G
#   tests/gpu/run_bundle.sh profile                device time per op family
#       (--device_op_timing) of the VQA model and of the 30B shape all resident
#       (VISMOE_PROFILE_30B=0: not the 30B shape), and each kernel's time under ncu
#   tests/gpu/run_bundle.sh ncu                    each kernel's device time under ncu, op by
#       op (no CUDA graphs), per decode step: the VQA model and the 30B shape all resident
#       (ncu30b: the 30B shape only)
#   tests/gpu/run_bundle.sh accelerate 24GiB 1 [TOKENS]
#       the transformers + accelerate baseline (tests/bench/accelerate_baseline.py)
#
# The device tool returns at most 8 files from $OUT, so everything goes into
# $OUT/<part>.tgz (written even when a run is killed at its limit) plus a short
# $OUT/<part>-summary.txt, and the benchmark reports as $OUT/<part>-reports.tgz.
# Each run is capped at VISMOE_RUN_TIMEOUT seconds (default 270).
# A dry run on a machine without a GPU: VISMOE_BACKEND=cpu and
# VISMOE_30B_MODEL=tests/fixtures/synthetic/qwen3-vl-mid (the 30B shape needs
# 58 GiB of host memory).
set -uo pipefail
OUT=${OUT:-/tmp/vismoe-out}
mkdir -p "$OUT"
what=${1:-}
shift || true
case "$what" in
  all | kernels | tests | vqa | bench | streams | realistic | deepseek | profile | ncu | ncu30b | accelerate) ;;
  *)
    echo "usage: $0 all | kernels | tests | vqa | bench BUDGET [IMAGES...] | streams | realistic | deepseek | profile |" \
      "ncu | ncu30b | accelerate MAX_GPU_MEMORY IMAGES [TOKENS]" >&2
    exit 2
    ;;
esac
root=$(pwd)
# make_bundle.sh ships the bundle packed; unpack it once.
if [ ! -d .gpu-bundle ] && [ -f .gpu-bundle.tgz ]; then tar xzf .gpu-bundle.tgz; fi
work=$(mktemp -d)
reports=$work/reports
mkdir -p "$reports"
tag=$what${1:+-$1}
summary="$OUT/$tag-summary.txt"
trap 'tar czf "$OUT/$tag.tgz" -C "$work" . 2>/dev/null; tar czf "$OUT/$tag-reports.tgz" -C "$reports" . 2>/dev/null' EXIT
limit=${VISMOE_RUN_TIMEOUT:-270}
bin=.gpu-bundle/bin

# cuBLAS is dlopen'ed; the CUDA toolkit or PyTorch's wheel provides it.
cublas=""
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$dir/libcublas.so.13" ] && cublas="$dir/libcublas.so.13" && break
done
[ -n "$cublas" ] || cublas=$(find / -name 'libcublas.so.13' -path '*lib*' 2>/dev/null | head -1)
[ -n "$cublas" ] || echo "warning: no libcublas.so.13 found; the CUDA backend will not start" >&2
export LD_LIBRARY_PATH="$root/.gpu-bundle/lib:${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}"
export VISMOE_FIXTURES_DIR="$root/tests/fixtures"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || echo "no GPU"; } |
  tee "$summary" "$work/gpu.txt"
echo "cublas: ${cublas:-none}" | tee -a "$summary"
cat .gpu-bundle/commit.txt 2>/dev/null | tee -a "$summary"
rc=0
note() { echo "$*" | tee -a "$summary"; }

run_tests() {
  for t in "$bin"/*_test; do
    name=$(basename "$t")
    timeout "$limit" "$t" --gtest_output="json:$work/$name.json" >"$work/$name.log" 2>&1 || rc=1
    # Totals, then each failed test once (gtest lists failures twice).
    { echo "== $name"; grep -E '^\[  (PASSED  |FAILED  |SKIPPED )\] [0-9]+ test' "$work/$name.log";
      grep -E '^\[  FAILED  \] [A-Za-z]' "$work/$name.log" | sed 's/ ([0-9]* ms)$//' |
        sort -u | head -20; } |
      tee -a "$summary"
  done
}

# One vismoe-bench-lite run: NAME, then its flags. The report lands in
# $reports/NAME.json, the log in $work/NAME.log; the summary gets the figures.
bench() {
  local name=$1 exe=$bin/vismoe-bench-lite
  shift
  [ "${VISMOE_BENCH:-}" = base ] && exe=$bin/vismoe-bench-lite-base
  timeout "$limit" "$exe" --json_out="$reports/$name.json" "$@" >/dev/null 2>"$work/$name.log" ||
    { rc=1; note "== $name FAILED"; tail -5 "$work/$name.log" | tee -a "$summary"; return 1; }
  python3 - "$reports/$name.json" "$name" <<'EOF' | tee -a "$summary"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"== {sys.argv[2]}: TTFT {r['ttft_seconds_mean']*1e3:.1f} ms, TPOT {r['tpot_seconds_mean']*1e3:.3f} ms, "
      f"decode hits {r.get('decode_hit_ratio', 0):.4f}, H2D {r['bytes_h2d']/1e9:.2f} GB, "
      f"bound {r.get('bound_seconds', 0):.3f} s of {r['total_seconds']:.3f} s, start-up {r['startup_seconds']:.1f} s")
for row in r.get("concurrency_sweep", []):
    print(f"   {row['streams']} streams: {row['output_tokens_per_s']:.1f} output tok/s "
          f"({row.get('output_tokens_per_s_vs_one', 0):.2f}x one), decode {row['decode_tokens_per_s']:.1f} tok/s "
          f"({row.get('decode_tokens_per_s_vs_one', 0):.2f}x one), TPOT {row['mean_tpot_seconds']*1e3:.3f} ms"
          f"{', identical outputs' if row.get('identical_outputs') else ''}")
EOF
}

backend=${VISMOE_BACKEND:-cuda}
model30b=${VISMOE_30B_MODEL:-tests/fixtures/synthetic/qwen3-vl-30b-a3b}
bench30b() {  # NAME BUDGET IMAGES [flags...]
  local name=$1 budget=$2 images=$3
  shift 3
  bench "$name" --model="$model30b" --synthetic_weights --backend="$backend" --budget="$budget" \
    --synthetic_images="$images" --max_new_tokens=128 \
    ${VISMOE_HOST_EXPERTS:+--host_experts=$VISMOE_HOST_EXPERTS} \
    ${VISMOE_SYNTHETIC_ROUTING:+--synthetic_routing=$VISMOE_SYNTHETIC_ROUTING} \
    --prefetch=router-lookahead --eviction=guarded --max_context_tokens=8192 \
    --prompt="Describe the images in detail." "$@"
}

# DeepSeek-V2-Lite's shape (the published config; latent attention, shared
# experts): text only, VISMOE_DEEPSEEK_MODEL=tests/fixtures/tiny-deepseek-v2-lite
# checks the script on the CPU.
model_deepseek=${VISMOE_DEEPSEEK_MODEL:-tests/fixtures/synthetic/deepseek-v2-lite}
bench_deepseek() {  # NAME BUDGET [flags...]
  local name=$1 budget=$2
  shift 2
  bench "$name" --model="$model_deepseek" --synthetic_weights --backend="$backend" \
    --budget="$budget" --synthetic_images=0 --max_new_tokens=128 --max_context_tokens=4096 \
    --prefetch=router-lookahead --eviction=guarded \
    --prompt="Tell me a long story about a lighthouse keeper and the sea." "$@"
}

vqa_model=tests/fixtures/vqa-direct-qwen3-vl-moe
run_vqa() {
  python3 tests/gpu/vqa_eval.py requests tests/fixtures/vqa-eval/eval.jsonl "$work/vqa.jsonl"
  local answers=tests/fixtures/vqa-eval/direct/transformers_answers.jsonl
  bench vqa-resident --model="$vqa_model" --backend="$backend" --budget=0 --requests="$work/vqa.jsonl" \
    --max_context_tokens=1024 || return
  python3 tests/gpu/vqa_eval.py compare "$reports/vqa-resident.json" "$answers" \
    "$work/vqa-resident-answers.txt" | head -12 | tee -a "$summary" || rc=1
  # A budget that forces misses: one pinned layer and 40 slabs for the other
  # five layers' 160 experts, on top of what the resident run's plan needed.
  local budget
  budget=$(python3 - "$work/vqa-resident.log" "$reports/vqa-resident.json" <<'EOF'
import json, re, sys
log = open(sys.argv[1]).read()
r = json.load(open(sys.argv[2]))
m = re.search(r"resident (\d+) bytes.*pinned prefix (\d+) MoE layers = (\d+) bytes.*"
              r"activations (\d+) bytes.*kv cache (\d+) bytes", log)
resident, layers, prefix, act, kv = (int(x) for x in m.groups())
print(resident + act + kv + prefix // layers + 40 * int(r["expert_bytes"]))
EOF
  ) || { rc=1; note "== vqa-misses: no budget (resident run's plan line missing)"; return; }
  bench vqa-misses --model="$vqa_model" --backend="$backend" --budget="$budget" --pinned_layers=1 \
    --prefetch=router-lookahead --requests="$work/vqa.jsonl" --max_context_tokens=1024 || return
  python3 tests/gpu/vqa_eval.py compare "$reports/vqa-misses.json" "$answers" \
    "$work/vqa-misses-answers.txt" | head -12 | tee -a "$summary" || rc=1
}

# Device time per op family of launches op by op (--device_op_timing turns
# the decode steps' graphs off), and each kernel's own device time under ncu
# (graph nodes too) for 16 tokens of a text prompt on the VQA model.
run_profile() {
  bench vqa-profile --model="$vqa_model" --backend="$backend" --budget=0 --max_context_tokens=1024 \
    --image=tests/fixtures/vqa-eval/img/0000.png --prompt="Describe the shapes in the picture." \
    --max_new_tokens=16 --repeat=8 --device_op_timing
  grep -A12 "device time per" "$work/vqa-profile.log" | tee -a "$summary"
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [ -n "$ncu" ]; then
    timeout "$limit" "$ncu" --csv --metrics gpu__time_duration.sum --log-file "$work/ncu-vqa.csv" \
      "$bin/vismoe-bench-lite" --model="$vqa_model" --backend="$backend" --budget=0 \
      --max_context_tokens=1024 --prompt="What is seven plus five?" --max_new_tokens=16 \
      --json_out="$reports/vqa-ncu.json" >/dev/null 2>"$work/ncu-vqa.log" || rc=1
    python3 tests/gpu/ncu_summary.py "$work/ncu-vqa.csv" 16 | tee -a "$summary"
  else
    note "== no ncu on this machine"
  fi
  [ "${VISMOE_PROFILE_30B:-1}" = 1 ] || return
  bench30b 30b-0-1img-profile 0 1 --device_op_timing
  grep -A12 "device time per" "$work/30b-0-1img-profile.log" | tee -a "$summary"
}

# Batched decode through the engine, all resident: one text request from 1
# and 8 concurrent streams, each stream's prompt its own (the experts of a
# step are the union of the streams'), then the same prompt from all (every
# stream routes alike: each expert read once per step serves all 8).
run_streams() {
  local story="Write a long story about a lighthouse keeper."
  bench30b 30b-0-streams-same 0 0 --prompt="$story" --concurrency=1,8 --concurrency_same_prompt
  bench30b 30b-0-streams 0 0 --prompt="$story" --concurrency=1,8
}

# One bench run under ncu: NAME, then its flags; graphs off, so every kernel
# is its own launch and ncu times each.
ncu_bench() {
  local name=$1 ncu
  shift
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { note "== no ncu on this machine"; return; }
  VISMOE_CUDA_GRAPHS=0 timeout "$limit" "$ncu" --csv --metrics gpu__time_duration.sum \
    --log-file "$work/$name.csv" "$bin/vismoe-bench-lite" --backend="$backend" --budget=0 \
    --json_out="$reports/$name.json" "$@" >/dev/null 2>"$work/$name.log" || rc=1
  note "== $name"
  python3 tests/gpu/ncu_summary.py "$work/$name.csv" | tee -a "$summary"
}

run_ncu() {
  ncu_bench ncu-vqa --model="$vqa_model" --max_context_tokens=1024 \
    --prompt="What is seven plus five?" --max_new_tokens=16
  ncu_30b
}

ncu_30b() {
  ncu_bench ncu-30b --model="$model30b" --synthetic_weights --max_context_tokens=1024 \
    --prompt="Describe a mixture of experts model in one sentence." --max_new_tokens=9
}

case "$what" in
  tests) run_tests ;;
  ncu) run_ncu ;;
  ncu30b) ncu_30b ;;
  streams) run_streams ;;
  realistic)
    # Routing-realistic synthetic weights (engine/model/synthetic_routing.md): the model's
    # own routing statistics all resident, then the offload figures at 24 and 40 GiB.
    export VISMOE_SYNTHETIC_ROUTING=realistic
    bench30b 30b-0-1img-realistic 0 1 --routing_stats
    grep -A4 "routing statistics" "$work/30b-0-1img-realistic.log" | tee -a "$summary"
    bench30b 30b-24G-1img-realistic 24G 1
    bench30b 30b-40G-1img-realistic 40G 1
    # Issue #36's table: FP8 experts (quantised at load, widened per group) at 24 GiB.
    bench30b 30b-24G-1img-realistic-fp8 24G 1 --expert_dtype=fp8
    ;;
  deepseek)
    # DeepSeek-V2-Lite's shape on CUDA (31 GB of bf16 weights): all resident, and at 12 GiB
    # (about a third of its experts as slabs).
    bench_deepseek deepseek-v2-lite-0 0
    bench_deepseek deepseek-v2-lite-12G 12G
    ;;
  vqa) run_vqa ;;
  profile) run_profile ;;
  bench)
    budget=${1:?bench needs a budget, e.g. 24G}
    shift
    [ $# -gt 0 ] || set -- 1 4
    for images in "$@"; do
      bench30b "bench-$budget-${images}img${VISMOE_HOST_EXPERTS:+-$VISMOE_HOST_EXPERTS}${VISMOE_BENCH:+-$VISMOE_BENCH}" \
        "$budget" "$images"
    done
    ;;
  kernels)
    start=$(date +%s)
    run_tests
    run_vqa
    note "-- tests and vqa done at $(( $(date +%s) - start )) s"
    bench30b 30b-0-1img 0 1
    [ -x "$bin/vismoe-bench-lite-base" ] && VISMOE_BENCH=base bench30b 30b-0-1img-base 0 1
    run_streams
    note "-- 30B runs done at $(( $(date +%s) - start )) s"
    ncu_30b
    note "-- kernels done at $(( $(date +%s) - start )) s"
    ;;
  all)
    start=$(date +%s)
    run_tests
    note "-- tests done at $(( $(date +%s) - start )) s"
    run_vqa
    note "-- vqa done at $(( $(date +%s) - start )) s"
    bench30b 30b-0-1img 0 1
    # The same with every Linear on cuBLAS (no GEMV), and the baseline build if it came along.
    VISMOE_CUDA_GEMV=0 bench30b 30b-0-1img-cublas 0 1
    [ -x "$bin/vismoe-bench-lite-base" ] && VISMOE_BENCH=base bench30b 30b-0-1img-base 0 1
    run_streams
    bench30b 30b-24G-1img 24G 1
    note "-- 30B runs done at $(( $(date +%s) - start )) s"
    run_profile
    note "-- profile done at $(( $(date +%s) - start )) s"
    [ "${VISMOE_ALL_NCU:-1}" = 1 ] && run_ncu
    note "-- all done at $(( $(date +%s) - start )) s"
    ;;
  accelerate)
    memory=${1:?accelerate needs a max GPU memory, e.g. 24GiB}
    images=${2:?accelerate needs an image count}
    tokens=${3:-32}
    run="accelerate-$memory-${images}img"
    timeout "$limit" python3 tests/bench/accelerate_baseline.py --shape qwen3-vl-30b-a3b \
      --max_gpu_memory "$memory" --images "$images" --new_tokens "$tokens" \
      --json_out "$reports/$run.json" >"$work/$run.log" 2>&1 || rc=1
    { echo "== $run"; tail -5 "$work/$run.log"; } | tee -a "$summary"
    ;;
esac
echo "rc $rc" | tee -a "$summary"
exit $rc
