// Test helper: a HostAllocator over the aligned heap that counts what it
// hands out, standing in for the CUDA backend's page-locking allocator.
// Not thread-safe (the host store allocates at Create only).
#ifndef VISMOE_TESTS_ENGINE_OFFLOAD_COUNTING_HOST_ALLOCATOR_H_
#define VISMOE_TESTS_ENGINE_OFFLOAD_COUNTING_HOST_ALLOCATOR_H_

#include <cstddef>

#include "engine/offload/host_expert_store.h"

namespace vismoe::testing {

class CountingHostAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes) override {
    ++allocations;
    bytes_total += bytes;
    return AlignedHostAllocator::Default()->Allocate(bytes);
  }
  void Free(void* p, size_t bytes) override {
    ++frees;
    AlignedHostAllocator::Default()->Free(p, bytes);
  }
  int allocations = 0, frees = 0;
  size_t bytes_total = 0;
};

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_ENGINE_OFFLOAD_COUNTING_HOST_ALLOCATOR_H_
