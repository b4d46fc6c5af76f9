#!/usr/bin/env bash
# Collects what a GPU machine needs to run the `gpu` tests and the CUDA
# benchmark into .gpu-bundle/ (git-ignored): the gpu test binaries,
# vismoe-bench-lite (the benchmark without OpenCV) and every shared library
# they load that is not part of the base system, CUDA's libcudart included.
# cuBLAS is dlopen'ed at run time from the GPU machine's own CUDA/PyTorch
# install (run_bundle.sh finds it). Name .gpu-bundle in the device tool's
# `carry` and run tests/gpu/run_bundle.sh there (its header lists the parts).
#   tests/gpu/make_bundle.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
out=$root/.gpu-bundle
grep -qx '/.gpu-bundle/' "$root/.gitignore" || { echo "add /.gpu-bundle/ to .gitignore" >&2; exit 1; }
tests=$(cd "$root/tests" && find . -name '*_gpu_test.cc' -printf '%f\n' | sed 's/\.cc$//' | sort)
cmake --build "$build" --target vismoe-bench-lite $tests
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=("$build/engine/vismoe-bench-lite")
for t in $tests; do bins+=("$build/tests/$t"); done
cp "${bins[@]}" "$out/bin/"
# The base system every Linux GPU machine has; everything else travels.
base='^(linux-vdso|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64|libcuda)\.so'
for b in "${bins[@]}"; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $base ]]; then cp -L "$path" "$out/lib/$name"; fi
done
du -sh "$out"
