// Forces a CPU kernel path (engine/ops/cpu/kernel_dispatch.h) for one scope,
// so a test can run every path the machine has; the previous setting comes
// back on destruction. Not thread-safe: no kernel may run while it changes.
#ifndef VISMOE_TESTS_TESTING_SCOPED_KERNEL_PATH_H_
#define VISMOE_TESTS_TESTING_SCOPED_KERNEL_PATH_H_

#include <optional>

#include "engine/ops/cpu/kernel_dispatch.h"

namespace vismoe::testing {

class ScopedKernelPath {
 public:
  explicit ScopedKernelPath(cpu::KernelPath p) : old_(cpu::ForceKernelPathForTesting(p)) {}
  ~ScopedKernelPath() { cpu::ForceKernelPathForTesting(old_); }
  ScopedKernelPath(const ScopedKernelPath&) = delete;
  ScopedKernelPath& operator=(const ScopedKernelPath&) = delete;

 private:
  std::optional<cpu::KernelPath> old_;
};

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_SCOPED_KERNEL_PATH_H_
