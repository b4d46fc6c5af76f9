#include "engine/ops/cpu/kernel_dispatch.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace vismoe::cpu {
namespace {

// -1: not forced; otherwise the KernelPath value.
std::atomic<int> g_forced{-1};

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX bit 29. Asked directly: clang 14's
// __builtin_cpu_supports has no "f16c" (GCC's does).
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool HasAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  // The runtime's avx2 check includes the OS's XSAVE support for the YMM state.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
#else
  return false;
#endif
}

bool HasAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  // Likewise for the ZMM and opmask state.
  __builtin_cpu_init();
  return HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// The best path the hardware runs, capped by VISMOE_CPU_KERNEL_PATH (an
// unknown value caps nothing), so every path's end-to-end exactness can be
// checked on one machine.
KernelPath Detect() {
  KernelPath best = HasAvx512() ? KernelPath::kAvx512
                    : HasAvx2() ? KernelPath::kAvx2
                                : KernelPath::kPortable;
  const char* env = std::getenv("VISMOE_CPU_KERNEL_PATH");
  if (env == nullptr) return best;
  for (KernelPath p : {KernelPath::kPortable, KernelPath::kAvx2, KernelPath::kAvx512}) {
    if (std::string_view(env) == KernelPathName(p)) return std::min(best, p);
  }
  return best;
}

}  // namespace

std::string_view KernelPathName(KernelPath p) {
  switch (p) {
    case KernelPath::kPortable:
      return "portable";
    case KernelPath::kAvx2:
      return "avx2";
    case KernelPath::kAvx512:
      return "avx512";
  }
  return "?";
}

KernelPath DetectedKernelPath() {
  static const KernelPath detected = Detect();
  return detected;
}

KernelPath ActiveKernelPath() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced < 0 ? DetectedKernelPath() : static_cast<KernelPath>(forced);
}

std::vector<KernelPath> AvailableKernelPaths() {
  std::vector<KernelPath> paths;
  for (KernelPath p : {KernelPath::kPortable, KernelPath::kAvx2, KernelPath::kAvx512}) {
    if (p <= DetectedKernelPath()) paths.push_back(p);
  }
  return paths;
}

std::optional<KernelPath> ForceKernelPathForTesting(std::optional<KernelPath> path) {
  int value = -1;
  if (path.has_value()) {
    value = *path <= DetectedKernelPath() ? static_cast<int>(*path) : -1;
  }
  const int old = g_forced.exchange(value);
  if (old < 0) return std::nullopt;
  return static_cast<KernelPath>(old);
}

}  // namespace vismoe::cpu
