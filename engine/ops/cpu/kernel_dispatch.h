// Which implementation of the CPU matrix kernels runs: chosen once at run time
// from the CPU's features, so one x86-64 binary (built without -march flags)
// uses AVX-512 or AVX2 + FMA + F16C where the machine has them and portable
// C++ elsewhere.
//
// Thread safety: ActiveKernelPath() may be called from any thread. The
// forcing hook is for tests and benchmarks only: call it while no kernel runs.
// Ownership: process-wide state; nothing to free.
#ifndef VISMOE_ENGINE_OPS_CPU_KERNEL_DISPATCH_H_
#define VISMOE_ENGINE_OPS_CPU_KERNEL_DISPATCH_H_

#include <optional>
#include <string_view>
#include <vector>

namespace vismoe::cpu {

// In order of preference: a machine that runs a path runs every one before it.
enum class KernelPath {
  kPortable,  // plain C++ (several accumulators; the compiler's baseline SIMD)
  kAvx2,      // AVX2 + FMA + F16C intrinsics (per-function target attributes)
  kAvx512,    // AVX-512 F + BW + VL rows kernels; otherwise the AVX2 kernels
};

std::string_view KernelPathName(KernelPath p);

// The fastest path this CPU (and OS) supports; the environment variable
// VISMOE_CPU_KERNEL_PATH=portable|avx2 (read once) caps it at that path, so a
// whole process (a parity test, the server) can run an older path.
KernelPath DetectedKernelPath();
// The path the kernels use now: the forced one if any, else DetectedKernelPath().
KernelPath ActiveKernelPath();
// Every path this machine can run, portable first.
std::vector<KernelPath> AvailableKernelPaths();

// Tests and benchmarks: makes the kernels use `path` (nullopt: back to the
// detected one). A path the machine cannot run is ignored (the detected one
// stays). Returns the previously forced value.
std::optional<KernelPath> ForceKernelPathForTesting(std::optional<KernelPath> path);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_KERNEL_DISPATCH_H_
