#!/usr/bin/env bash
# Miss policies under the CPU copy engine (engine/policy/host_experts.md): vismoe-bench with
# fetch, cpu (miss computed on the host when the measured host time beats the copy) and a static
# host placement (--host_moe_layers), at fixed copy bandwidths, interleaved: each round runs every
# (bandwidth, policy) cell once, so a slow spell of the shared machine hits every cell alike.
# Prints one table row per cell: medians over the rounds of TTFT, TPOT, stall seconds per run,
# and the per-run counts (bytes copied, experts host-computed, bytes not copied, hit ratio).
#   tests/bench/host_experts_sweep.sh mid|vqa [OUTDIR]   (BIN=dir holding vismoe-bench,
#   ROUNDS=3, BANDWIDTHS="200M 1G 4G", STATIC="host layers of each static row", THREADS=1)
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${1:?mid or vqa}"
out="${2:-/tmp/host-experts-$model}"; mkdir -p "$out"
B="${BIN:-build/release/engine}"
rounds="${ROUNDS:-3}"
bandwidths="${BANDWIDTHS:-200M 1G 4G}"
threads="${THREADS:-1}"
case "$model" in
  mid)  # synthetic weights of the scaled-down Qwen3-VL shapes: 8 MoE layers, 32 experts top-4
    static="${STATIC:-4 7}"
    args=(--model=tests/fixtures/synthetic/qwen3-vl-mid --synthetic_weights --budget=80M
      --max_context_tokens=512 --pinned_layers=1 --synthetic_images=1 --max_new_tokens=32) ;;
  vqa)  # the trained model on its 36 calibration requests (24 with a picture)
    static="${STATIC:-3 5}"
    args=(--model=tests/fixtures/vqa-qwen3-vl-moe --budget=12M --max_context_tokens=1024
      --pinned_layers=1 --max_new_tokens=16 --requests=tests/fixtures/vqa-eval/calibration.jsonl) ;;
  *) echo "model must be mid or vqa" >&2; exit 2 ;;
esac
args+=(--threads="$threads" --prefetch=none --eviction=lru)

for round in $(seq 1 "$rounds"); do
  for bw in $bandwidths; do
    for policy in fetch cpu $(printf 'static%s ' $static); do
      extra=(--copy_bandwidth="$bw")
      case $policy in
        fetch) extra+=(--miss_policy=fetch) ;;
        cpu) extra+=(--miss_policy=cpu) ;;
        static*) extra+=(--miss_policy=fetch --host_moe_layers="${policy#static}") ;;
      esac
      f="$out/$bw-$policy-$round"
      nice -n 15 "$B/vismoe-bench" "${args[@]}" "${extra[@]}" --json_out="$f.json" >"$f.log" 2>&1
      echo "round $round, $bw, $policy: done" >&2
    done
  done
done

python3 - "$out" "$rounds" "$bandwidths" "$static" <<'PY'
import json, statistics, sys
out, rounds, bandwidths, static = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
names = {"fetch": "fetch", "cpu": "cpu-miss"}
names.update({f"static{n}": f"static, {n} host layers" for n in static})
print("| copy bandwidth | policy | TTFT ms | TPOT ms | stall s/run | MB copied/run "
      "| experts host-computed/run | MB not copied/run | hit ratio | TPOT vs fetch |")
print("|---|---|---|---|---|---|---|---|---|---|")
for bw in bandwidths:
    for policy in names:
        rs = [json.load(open(f"{out}/{bw}-{policy}-{r}.json")) for r in range(1, rounds + 1)]
        med = lambda k: statistics.median(r[k] for r in rs)
        tpot = med("tpot_seconds_mean")
        # Per-round ratio to the fetch run of the same round, then the median.
        ratio = statistics.median(
            r["tpot_seconds_mean"] / json.load(open(f"{out}/{bw}-fetch-{i}.json"))["tpot_seconds_mean"]
            for i, r in enumerate(rs, 1))
        print(f"| {bw}B/s | {names[policy]} | {1e3 * med('ttft_seconds_mean'):.1f} "
              f"| {1e3 * tpot:.2f} | {med('stall_seconds'):.2f} | {med('bytes_h2d') / 1e6:.1f} "
              f"| {med('experts_host_computed'):.0f} | {med('bytes_not_copied') / 1e6:.1f} "
              f"| {med('hit_ratio'):.3f} | {ratio:.2f} |")
PY
