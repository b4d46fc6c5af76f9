#!/usr/bin/env bash
# Installs every build and test dependency of VisMoE from Debian 12 packages.
# This is the single list of dependencies: .ci/run, README and the Dockerfile use it.
# Idempotent: packages already present are left alone. Needs root (or sudo).
#
#   deploy/install-deps.sh            build + test dependencies
#   deploy/install-deps.sh --runtime  only the shared libraries vismoe-server needs to run
set -euo pipefail

RUNTIME_PKGS=(
  libgrpc++1.51 libprotobuf32 libabsl20220623
  libopencv-core406 libopencv-imgproc406 libopencv-imgcodecs406 libwebp7
  libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
  libpcre2-8-0 libutf8proc2 libspdlog1.10 libssl3 ca-certificates
  libcpp-httplib0.11
)
BUILD_PKGS=(
  build-essential cmake ninja-build pkg-config git curl
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev libwebp-dev
  # vismoe-bench-lite (the GPU bundle's benchmark) reads PNG files without OpenCV.
  libpng-dev
  # the server checks its TLS certificate and key files with OpenSSL.
  libssl-dev
  prometheus-cpp-dev
  # the OpenAI-compatible HTTP API (--http_listen).
  libcpp-httplib-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libspdlog-dev
  # tests: a real Prometheus server (promtool too) for the metrics e2e tests.
  prometheus
  # fuzz preset (tests/fuzz): clang, libFuzzer + sanitizer runtimes, and
  # llvm-symbolizer for readable crash reports.
  clang libclang-rt-14-dev llvm
  # tests: a Python virtual environment for the pinned openai package
  # (tests/setup_python.sh); grpcio for the example client is optional.
  python3-venv
)

pkgs=("${RUNTIME_PKGS[@]}")
if [[ "${1:-}" != "--runtime" ]]; then
  pkgs+=("${BUILD_PKGS[@]}")
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
