#!/usr/bin/env bash
# Our CPU backend against llama.cpp, side by side (issue #20). Builds llama.cpp from the PyPI
# llama-cpp-python source distribution (its vendored tree), writes the same random checkpoints
# for both engines (tests/bench/llamacpp_compare.py checkpoint), converts them to GGUF with the
# vendored convert_hf_to_gguf.py, then runs interleaved rounds (ours, llama.cpp, ours, ...) and
# prints prefill and decode tokens/s of both, the per-round ratio and its median, and the
# bandwidth ceiling (bytes of active weights per decoded token / measured read bandwidth).
# Doc and measured table: tests/bench/llamacpp_compare.md. A benchmark, not a CTest test.
#
# Usage: tests/bench/llamacpp_compare.sh            (from a clean checkout; downloads and builds
#                                                    into $LLAMACPP_COMPARE_DIR)
# Env:   LLAMACPP_COMPARE_DIR  work dir (default build/llamacpp_compare): sdist, llama.cpp build,
#                              venv, checkpoints, GGUFs, results/<time>/
#        VISMOE_BUILD_DIR      our build (default build/release; vismoe-bench is built if absent)
#        ROUNDS (5), THREADS (2), PROMPT_TOKENS (128), NEW_TOKENS (64)
#        ROWS  subset of: text-bf16 text-f16 mid-bf16 mid-fused-bf16 vl-bf16 vl-f16 (all)
#        LLAMA_CPP_PYTHON (llama-cpp-python==0.3.36), TORCH (torch==2.11.0: the converter
#        imports torch; PyPI's wheel brings its CUDA wheels, ~4 GB, once per work dir)
# Rows:  text-*          Qwen3-MoE (qwen3_moe, per-expert tensors), hidden 1024, 12 layers,
#                        64 experts top-8, 1.9 GB; PROMPT_TOKENS-token text prompt
#        mid-bf16        qwen3-vl-mid's decoder as qwen3_moe (per-expert), text prompt
#        mid-fused-bf16  the same text weights in qwen3_vl_moe's fused layout, text prompt
#        vl-*            qwen3-vl-mid (qwen3_vl_moe, fused) with one 448x448 image (196 visual
#                        tokens): llama-mtmd-cli on their side
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
WORK=$(mkdir -p "${LLAMACPP_COMPARE_DIR:-build/llamacpp_compare}" && cd "${LLAMACPP_COMPARE_DIR:-build/llamacpp_compare}" && pwd)
BUILD=${VISMOE_BUILD_DIR:-build/release}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-2}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
NEW_TOKENS=${NEW_TOKENS:-64}
ROWS=${ROWS:-text-bf16 text-f16 mid-bf16 mid-fused-bf16 vl-bf16 vl-f16}
LLAMA_CPP_PYTHON=${LLAMA_CPP_PYTHON:-llama-cpp-python==0.3.36}
TORCH=${TORCH:-torch==2.11.0}
HELPER="$ROOT/tests/bench/llamacpp_compare.py"
VL_PROMPT="Describe the image."
log() { echo "[llamacpp_compare] $*" >&2; }

# --- llama.cpp: the sdist's vendored tree, CPU only ----------------------------------------
fetch_llama() {
  if ! ls "$WORK"/llama_cpp_python-*/vendor/llama.cpp/CMakeLists.txt >/dev/null 2>&1; then
    log "downloading the $LLAMA_CPP_PYTHON source distribution"
    python3 -m pip download --no-binary :all: --no-deps "$LLAMA_CPP_PYTHON" -d "$WORK/sdist"
    tar -xzf "$WORK"/sdist/llama_cpp_python-*.tar.gz -C "$WORK"
  fi
  LLAMA=$(ls -d "$WORK"/llama_cpp_python-*/vendor/llama.cpp | head -1)
  LLAMA_COMMIT=$(git -C "$LLAMA" rev-parse HEAD 2>/dev/null || echo unknown)
}

# GGML_NATIVE=ON: -march=native (the machine's AVX2 / AVX-512); OpenMP threads; no curl, server
# or tests. A build made on another CPU is redone (cpu.txt: model and SIMD flags), so a host
# change cannot leave llama.cpp on the old machine's instructions. Our build needs no -march: it
# picks its kernels at run time.
LLAMA_CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF
                   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)
build_llama() {  # only the tools the rows need: llama-mtmd-cli (libmtmd) is the longer build
  local targets=(llama-bench) missing=() t cpu
  [[ " $ROWS" == *" vl-"* ]] && targets+=(llama-mtmd-cli)
  cpu=$(grep -m1 '^model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo
        grep -m1 -o -w -E 'avx2|avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')
  if [[ -d "$WORK/llama-build" && "$(cat "$WORK/llama-build/cpu.txt" 2>/dev/null)" != "$cpu" ]]; then
    log "llama.cpp was built on another CPU (or before cpu.txt): building it again"
    rm -rf "$WORK/llama-build"
  fi
  for t in "${targets[@]}"; do [[ -x "$WORK/llama-build/bin/$t" ]] || missing+=("$t"); done
  if ((${#missing[@]})); then
    log "building ${missing[*]} of llama.cpp ${LLAMA_COMMIT:0:12}: ${LLAMA_CMAKE_FLAGS[*]}"
    nice -n 10 cmake -S "$LLAMA" -B "$WORK/llama-build" "${LLAMA_CMAKE_FLAGS[@]}" >/dev/null
    nice -n 10 cmake --build "$WORK/llama-build" -j2 --target "${missing[@]}"
    echo "$cpu" >"$WORK/llama-build/cpu.txt"
  fi
}

# --- Python for the checkpoints and the converter ------------------------------------------
make_venv() {
  PY="$WORK/venv/bin/python"
  if ! "$PY" -c "import torch, transformers, gguf, numpy, tokenizers" 2>/dev/null; then
    log "installing the converter's Python packages into $WORK/venv"
    python3 -m venv "$WORK/venv"
    nice -n 10 "$PY" -m pip install --quiet "$TORCH" "numpy~=2.2.6" "sentencepiece>=0.1.98,<0.3.0" \
      transformers==4.57.6 "protobuf>=4.21.0,<5.0.0" "$LLAMA/gguf-py"
  fi
}

build_ours() {
  BENCH="$BUILD/engine/vismoe-bench"
  if [[ ! -x "$BENCH" ]]; then
    [[ -f "$BUILD/CMakeCache.txt" ]] || cmake --preset release >/dev/null
    nice -n 10 cmake --build "$BUILD" -j2 --target vismoe-bench
  fi
}

# --- checkpoints, GGUFs, image, prompt ----------------------------------------------------
make_models() {
  local kind
  for kind in text mid vl; do
    if [[ ! -f "$WORK/ckpt/$kind-bf16/model.safetensors" || ! -f "$WORK/ckpt/$kind-f16/model.safetensors" ]]; then
      log "writing the $kind checkpoints"
      nice -n 10 "$PY" "$HELPER" checkpoint "$kind" --out_bf16 "$WORK/ckpt/$kind-bf16" \
        --out_f16 "$WORK/ckpt/$kind-f16"
    fi
  done
  mkdir -p "$WORK/gguf"
  local name dtype
  for name in text-bf16 text-f16 mid-bf16 vl-bf16 vl-f16; do
    dtype=${name##*-}
    if [[ ! -f "$WORK/gguf/$name.gguf" ]]; then
      log "converting $name to GGUF $dtype"
      nice -n 10 "$PY" "$HELPER" convert --llama "$LLAMA" "$WORK/ckpt/$name" --outtype "$dtype" \
        --outfile "$WORK/gguf/$name.gguf" >"$WORK/gguf/$name.log" 2>&1 || { tail -20 "$WORK/gguf/$name.log"; exit 1; }
    fi
    if [[ $name == vl-* && ! -f "$WORK/gguf/mmproj-$name.gguf" ]]; then
      nice -n 10 "$PY" "$HELPER" convert --llama "$LLAMA" "$WORK/ckpt/$name" --outtype "$dtype" \
        --mmproj --outfile "$WORK/gguf/mmproj-$name.gguf" >"$WORK/gguf/mmproj-$name.log" 2>&1 ||
        { tail -20 "$WORK/gguf/mmproj-$name.log"; exit 1; }
    fi
  done
  [[ -f "$WORK/img448.png" ]] || "$PY" "$HELPER" image --out "$WORK/img448.png"
  TEXT_PROMPT=$("$PY" "$HELPER" prompt --tokenizer "$WORK/ckpt/text-bf16/tokenizer.json" \
    --tokens "$PROMPT_TOKENS")
}

# --- one run of each side; each writes $RES/round<R>.<row>.<side>.json --------------------
checkpoint_of() {  # row -> our checkpoint dir
  case $1 in mid-fused-bf16) echo "$WORK/ckpt/vl-bf16" ;; *) echo "$WORK/ckpt/$1" ;; esac
}
gguf_of() {
  case $1 in mid-fused-bf16) echo "$WORK/gguf/vl-bf16.gguf" ;; *) echo "$WORK/gguf/$1.gguf" ;; esac
}
meta() {  # round row -> JSON fields every round file carries
  printf '{"round": %d, "row": "%s", "config": "%s/config.json", "loadavg": "%s"}' \
    "$1" "$2" "$(checkpoint_of "$2")" "$(cut -d' ' -f1-3 /proc/loadavg)"
}

run_ours() {  # round row
  local r=$1 row=$2 raw="$RES/raw/round$1.$2.ours"
  local args=(--model="$(checkpoint_of "$row")" --budget=0 --threads="$THREADS"
              --max_context_tokens=1024 --max_new_tokens="$NEW_TOKENS" --repeat=2 --json_out="$raw.json")
  if [[ $row == vl-* ]]; then args+=(--image="$WORK/img448.png" --prompt="$VL_PROMPT")
  else args+=(--prompt="$TEXT_PROMPT"); fi
  "$BENCH" "${args[@]}" >/dev/null 2>"$raw.log" || { tail "$raw.log"; exit 1; }
  "$PY" "$HELPER" ours --report "$raw.json" --new_tokens "$NEW_TOKENS" --skip_runs 1 \
    --meta "$(meta "$r" "$row")" --out "$RES/round$r.$row.ours.json"
}

run_llama() {  # round row
  local r=$1 row=$2 raw="$RES/raw/round$1.$2.llama" bin="$WORK/llama-build/bin"
  if [[ $row == vl-* ]]; then
    "$bin/llama-mtmd-cli" -m "$(gguf_of "$row")" --mmproj "$WORK/gguf/mmproj-$row.gguf" \
      --image "$WORK/img448.png" -p "$VL_PROMPT" -n "$NEW_TOKENS" --temp 0 --ignore-eos \
      -t "$THREADS" -c 1024 -lv 4 >"$raw.log" 2>&1 || { tail "$raw.log"; exit 1; }
    "$PY" "$HELPER" mtmd --log "$raw.log" --meta "$(meta "$r" "$row")" --out "$RES/round$r.$row.llama.json"
  else
    # pp: the prompt from an empty context; tg: NEW_TOKENS tokens after PROMPT_TOKENS of
    # context (-d), as our decode follows the prompt. One warm-up run each (llama-bench's own),
    # one timed run, as on our side (--repeat=2, the first run dropped).
    "$bin/llama-bench" -m "$(gguf_of "$row")" -t "$THREADS" -p "$PROMPT_TOKENS" -n 0 -r 1 \
      -o json >"$raw.pp.json" 2>"$raw.pp.log" || { tail "$raw.pp.log"; exit 1; }
    "$bin/llama-bench" -m "$(gguf_of "$row")" -t "$THREADS" -p 0 -n "$NEW_TOKENS" \
      -d "$PROMPT_TOKENS" -r 1 -o json >"$raw.tg.json" 2>"$raw.tg.log" || { tail "$raw.tg.log"; exit 1; }
    "$PY" "$HELPER" llama-bench --reports "$raw.pp.json" "$raw.tg.json" \
      --meta "$(meta "$r" "$row")" --out "$RES/round$r.$row.llama.json"
  fi
}

bandwidth() {  # appends one read-bandwidth measurement (our streaming sum, THREADS threads)
  "$BENCH" --model="$WORK/ckpt/mid-bf16" --budget=0 --threads="$THREADS" --max_new_tokens=1 \
    --micro_kernels --micro_seconds=0.05 --json_out="$RES/raw/micro_kernels.$1.json" >/dev/null 2>&1
}

fetch_llama
build_llama
make_venv
build_ours
make_models
RES="$WORK/results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RES/raw"
{
  echo "date: $(date -Is)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512_bf16)$' | xargs)"
  echo "llama.cpp: $LLAMA_CPP_PYTHON sdist, vendored commit $LLAMA_COMMIT, cmake ${LLAMA_CMAKE_FLAGS[*]}"
  echo "ours: $(git -C "$ROOT" rev-parse HEAD) ($BENCH)"
  echo "rounds $ROUNDS, threads $THREADS, prompt $PROMPT_TOKENS tokens, $NEW_TOKENS new tokens"
  echo "text prompt: $TEXT_PROMPT"
} | tee "$RES/machine.txt" >&2

bandwidth before
for r in $(seq 1 "$ROUNDS"); do
  log "round $r/$ROUNDS, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for row in $ROWS; do
    run_ours "$r" "$row"
    run_llama "$r" "$row"
  done
done
bandwidth after
"$PY" - "$RES" "$THREADS" <<'PY'
import json, sys
res, threads = sys.argv[1], int(sys.argv[2])
bw = [json.load(open(f"{res}/raw/micro_kernels.{w}.json"))["micro_kernels"]["read_bandwidth_gbps"]
      for w in ("before", "after")]
json.dump({"threads": threads, "read_bandwidth_gbps": bw}, open(f"{res}/bandwidth.json", "w"))
PY
"$PY" "$HELPER" table --results "$RES" --bandwidth "$RES/bandwidth.json" --rows $ROWS \
  --out "$RES/summary.json" | tee "$RES/table.md"
log "results: $RES"
