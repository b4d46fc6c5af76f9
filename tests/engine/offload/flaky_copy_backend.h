// Test helper: a CopyBackend that memcpy's, except that copies numbered in
// [fail_from, fail_to) (0-based, in copy order) fail with "device lost" --
// a device error mid-run. Thread-safe (the copy thread calls Copy).
#ifndef VISMOE_TESTS_ENGINE_OFFLOAD_FLAKY_COPY_BACKEND_H_
#define VISMOE_TESTS_ENGINE_OFFLOAD_FLAKY_COPY_BACKEND_H_

#include <atomic>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "engine/offload/copy_backend.h"

namespace vismoe::testing {

class FlakyCopyBackend final : public CopyBackend {
 public:
  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    const int n = copies.fetch_add(1);
    if (n >= fail_from.load() && n < fail_to.load()) return absl::InternalError("device lost");
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  const char* name() const override { return "flaky"; }
  // Every copy from now on fails (true) or none does (false).
  void FailFromNow(bool fail) {
    fail_from = fail ? 0 : std::numeric_limits<int>::max();
    fail_to = std::numeric_limits<int>::max();
  }

  std::atomic<int> copies{0};
  std::atomic<int> fail_from{0};
  std::atomic<int> fail_to{0};
};

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_ENGINE_OFFLOAD_FLAKY_COPY_BACKEND_H_
