#!/usr/bin/env bash
# Collects what a GPU machine needs to run the `gpu` tests and the CUDA
# benchmark into .gpu-bundle/ (git-ignored): the gpu test binaries,
# vismoe-bench-lite (the benchmark without OpenCV) and every shared library
# they load that is not part of the base system, CUDA's libcudart included,
# then packs it as .gpu-bundle.tgz: the tree plus the unpacked bundle no longer
# fit the device tool's 64 MiB, the archive does. cuBLAS is dlopen'ed at run
# time from the GPU machine's own CUDA/PyTorch install (run_bundle.sh finds
# it). Name .gpu-bundle.tgz in the device tool's `carry` and run
# tests/gpu/run_bundle.sh there (it unpacks the archive; its header lists the parts).
#   tests/gpu/make_bundle.sh [BUILD_DIR]   (default build/release)
# With VISMOE_BASE_BUILD=DIR (a build of another commit, e.g. the last one
# measured), its vismoe-bench-lite travels too, as bin/vismoe-bench-lite-base:
# run_bundle.sh times it beside this build on the same device.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
out=$root/.gpu-bundle
for ignored in /.gpu-bundle/ /.gpu-bundle.tgz; do
  grep -qx "$ignored" "$root/.gitignore" || { echo "add $ignored to .gitignore" >&2; exit 1; }
done
tests=$(cd "$root/tests" && find . -name '*_gpu_test.cc' -printf '%f\n' | sed 's/\.cc$//' | sort)
# Unit tests with a cuda parameter that skips without a device: every decoder
# and vision op of the CUDA backend against the double-precision reference.
tests="$tests backend_ops_test vision_ops_test"
cmake --build "$build" --target vismoe-bench-lite $tests
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=("$build/engine/vismoe-bench-lite")
for t in $tests; do bins+=("$build/tests/$t"); done
cp "${bins[@]}" "$out/bin/"
if [ -n "${VISMOE_BASE_BUILD:-}" ]; then
  cp "$VISMOE_BASE_BUILD/engine/vismoe-bench-lite" "$out/bin/vismoe-bench-lite-base"
  bins+=("$VISMOE_BASE_BUILD/engine/vismoe-bench-lite")
fi
# Which tree the binaries are of (uncommitted changes marked dirty).
{ echo "bundle of $(git -C "$root" describe --always --dirty)";
  [ -n "${VISMOE_BASE_BUILD:-}" ] &&
    echo "base: $(git -C "$VISMOE_BASE_BUILD/../.." describe --always --dirty 2>/dev/null)"; } \
  >"$out/commit.txt"
# The base system every Linux GPU machine has; everything else travels.
base='^(linux-vdso|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64|libcuda)\.so'
for b in "${bins[@]}"; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $base ]]; then cp -L "$path" "$out/lib/$name"; fi
done
tar czf "$out.tgz" -C "$root" .gpu-bundle
du -sh "$out" "$out.tgz"
