#!/usr/bin/env bash
# Builds the fuzz preset and runs every fuzz target (or those named) for a
# fixed time over its corpus; fails if any target finds a crash, a sanitizer
# report, a leak or a timeout. CI runs it (.ci/run) with a short time.
#   tests/fuzz/run_fuzzers.sh [seconds per target, default 20] [target...]
# Targets are the <name> of tests/fuzz/<name>_fuzzer.cc. Each run starts from
#   build/fuzz/corpus/<name>   what earlier runs found (libFuzzer adds to it)
#   tests/fuzz/corpus/<name>   committed seeds and past crashes (read only)
#   build/fuzz/seeds/<name>    seeds copied from the fixtures (seed_corpora.sh)
# Crashing inputs are written to build/fuzz/artifacts/<name>/; the log of each
# run to build/fuzz/logs/<name>.log. Extra libFuzzer flags: FUZZ_FLAGS="...".
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-20}"
shift || true
build=build/fuzz

start=$(date +%s)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
echo "run_fuzzers: build took $(( $(date +%s) - start )) s"
bash tests/fuzz/seed_corpora.sh "$build/seeds"

targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in tests/fuzz/*_fuzzer.cc; do
    name=$(basename "$src" .cc)
    targets+=("${name%_fuzzer}")
  done
fi

failed=()
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t" "$build/logs"
  dirs=("$build/corpus/$t")
  [[ -d "tests/fuzz/corpus/$t" ]] && dirs+=("tests/fuzz/corpus/$t")
  [[ -d "$build/seeds/$t" ]] && dirs+=("$build/seeds/$t")
  log="$build/logs/$t.log"
  # -timeout: one input may take at most 25 s (a hang is a finding too).
  # shellcheck disable=SC2086  # FUZZ_FLAGS is a list of flags
  if "$build/tests/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=25 \
      -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" \
      ${FUZZ_FLAGS:-} "${dirs[@]}" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  echo "run_fuzzers: $t: $status, ${execs:-?} executions (${rate:-?}/s)," \
    "${cov:-no coverage line}"
  if [[ $status == FAILED ]]; then
    tail -n 60 "$log"
    ls -l "$build/artifacts/$t/"
  fi
done
echo "run_fuzzers: done in $(( $(date +%s) - start )) s"
if ((${#failed[@]} > 0)); then
  echo "run_fuzzers: FAILED: ${failed[*]} (inputs in $build/artifacts/, see tests/fuzz/README.md)"
  exit 1
fi
