#!/usr/bin/env bash
# Per-sequence preload (MELINOE, engine/policy/preload.md): vismoe-bench with --preload off and
# on against each eviction policy, on
#   vqa:  the trained VQA model (tests/fixtures/vqa-qwen3-vl-moe), two request sets: its 36
#         calibration requests, and the 150 eval questions with the longest answers (caption and
#         list: 9.1 and 6.5 tokens with EOS), 16 new tokens at most, 1 pinned MoE layer, budgets
#         11 / 12 / 14 / 16 MiB (17 / 34 / 68 / 102 slabs of the 160 offloaded experts);
#   mid:  tests/fixtures/synthetic/qwen3-vl-mid (synthetic weights, RANDOM routing), 6 requests
#         (4 text, 2 with a picture), 32 new tokens, 64 MiB budget, 1 pinned layer; plus the
#         batch sweep (--batch_sizes) where several sequences share the cache by the quota, at
#         64 MiB (7 slabs) and, alone, at 96 MiB (49 slabs).
# Eviction rows: lru and lfu without prefetch, guarded with router-lookahead (its predictor),
# and lru + history (the server's default). One fresh vismoe-bench per cell, one thread, a fixed
# copy throttle; every JSON report is kept and the tables are printed (preload_table.py).
# Usage: tests/bench/preload_sweep.sh [BUILD_DIR] [OUT_DIR]   (PART=vqa|params|mid|batch|all)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/release}
OUT=${2:-/tmp/vismoe-preload}
PART=${PART:-all}
B="$BUILD/engine/vismoe-bench"
mkdir -p "$OUT"

# The request sets, with absolute image paths.
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
src = "tests/fixtures/vqa-eval"
instr = "\nAnswer the question using a single word or phrase."
with open(os.path.join(src, "calibration.jsonl")) as f, open(f"{out}/calib.jsonl", "w") as o:
    for line in f:
        r = json.loads(line)
        if r.get("images"):
            r["images"] = [os.path.abspath(os.path.join(src, p)) for p in r["images"]]
        o.write(json.dumps(r) + "\n")
with open(os.path.join(src, "eval.jsonl")) as f, open(f"{out}/long.jsonl", "w") as o:
    for line in f:
        q = json.loads(line)
        if q["category"] not in ("caption", "list"):
            continue
        r = {"prompt": q["question"] + instr, "max_new_tokens": 16}
        if q.get("image"):
            r["images"] = [os.path.abspath(os.path.join(src, q["image"]))]
        o.write(json.dumps(r) + "\n")
img = [os.path.abspath(os.path.join(src, "img", f)) for f in ("0000.png", "0003.png")]
prompts = ["Describe a mixture of experts model in one sentence.",
           "Write a short story about a lighthouse keeper.",
           "List five uses of a paperclip.",
           "Explain how a bicycle stays upright."]
with open(f"{out}/mid.jsonl", "w") as o:
    for p in prompts:
        o.write(json.dumps({"prompt": p, "max_new_tokens": 32}) + "\n")
    for i in img:
        o.write(json.dumps({"prompt": "Describe the picture.", "images": [i],
                            "max_new_tokens": 32}) + "\n")
PY

# policy name -> vismoe-bench flags
declare -A POLICY=(
  [lru]="--eviction=lru --prefetch=none"
  [lfu]="--eviction=lfu --prefetch=none"
  [guarded]="--eviction=guarded --prefetch=router-lookahead"
  [lru-history]="--eviction=lru --prefetch=history"
)
POLICIES=(lru lfu guarded lru-history)

run() {  # $1 = name, rest = flags
  local name=$1; shift
  nice -n 15 "$B" "$@" --json_out="$OUT/$name.json" >"$OUT/$name.log" 2>&1 ||
    { echo "FAILED: $name" >&2; tail -5 "$OUT/$name.log" >&2; return 1; }
}

if [[ $PART == vqa || $PART == all ]]; then
  M=tests/fixtures/vqa-qwen3-vl-moe
  for set in calib long; do
    for budget in 11 12 14 16; do
      for pol in "${POLICIES[@]}"; do
        for pre in none prefill-routing; do
          # shellcheck disable=SC2086
          run "vqa-$set-$budget-$pol-$pre" --model=$M --budget=${budget}M --max_context_tokens=1024 \
            --pinned_layers=1 --copy_bandwidth=200M --threads=1 --requests="$OUT/$set.jsonl" \
            ${POLICY[$pol]} --preload=$pre
        done
      done
      echo "vqa $set ${budget} MiB: done"
    done
  done
fi

if [[ $PART == params || $PART == all ]]; then
  # Experts per layer and share, on the long answers: at 11 MiB with LRU (where preload pays)
  # and at 14 MiB with LFU (MELINOE's policy, where it does not).
  M=tests/fixtures/vqa-qwen3-vl-moe
  for cfg in 11-lru 14-lfu; do
    for n in 1 2 4 8; do
      for share in 0.25 0.5 0.75 1.0; do
        run "params-$cfg-$n-$share" --model=$M --budget=${cfg%-*}M --max_context_tokens=1024 \
          --pinned_layers=1 --copy_bandwidth=200M --threads=1 --requests="$OUT/long.jsonl" \
          --eviction=${cfg#*-} --prefetch=none --preload=prefill-routing --preload_experts=$n \
          --preload_share=$share
      done
    done
  done
  echo "params: done"
fi

if [[ $PART == mid || $PART == all ]]; then
  M=tests/fixtures/synthetic/qwen3-vl-mid
  for pol in "${POLICIES[@]}"; do
    for pre in none prefill-routing; do
      # shellcheck disable=SC2086
      run "mid-$pol-$pre" --model=$M --synthetic_weights --budget=64M --max_context_tokens=256 \
        --pinned_layers=1 --copy_bandwidth=1G --threads=2 --requests="$OUT/mid.jsonl" \
        ${POLICY[$pol]} --preload=$pre --batch_sizes=1,4,8 --batch_decode_steps=16
    done
    echo "mid $pol: done"
  done
fi

if [[ $PART == batch || $PART == all ]]; then
  # Sharing the cache: the batch sweep alone on qwen3-vl-mid with a 96 MiB budget (49 slabs, a
  # per-sequence quota of 24 / 6 / 3 at B = 1 / 4 / 8 with share 0.5), preload off, share 0.5
  # and share 1.0 (the main run's one request is a minimal one).
  M=tests/fixtures/synthetic/qwen3-vl-mid
  for pre in none 0.5 1.0; do
    flags=(--preload=none)
    [[ $pre != none ]] && flags=(--preload=prefill-routing --preload_share=$pre)
    run "batch-$pre" --model=$M --synthetic_weights --budget=96M --max_context_tokens=256 \
      --pinned_layers=1 --copy_bandwidth=1G --threads=2 --max_new_tokens=1 --eviction=lru \
      "${flags[@]}" --batch_sizes=1,2,4,8 --batch_decode_steps=16
  done
  echo "batch: done"
fi

python3 tests/bench/preload_table.py "$OUT"
