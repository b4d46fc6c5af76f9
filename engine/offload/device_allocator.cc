#include "engine/offload/device_allocator.h"

#include "engine/offload/host_expert_store.h"

namespace vismoe {

// The same page-aligned heap memory the CPU backend used before the hook.
void* HeapDeviceAllocator::Allocate(size_t bytes) {
  return AlignedHostAllocator::Default()->Allocate(bytes);
}

void HeapDeviceAllocator::Free(void* p, size_t bytes) {
  AlignedHostAllocator::Default()->Free(p, bytes);
}

HeapDeviceAllocator* HeapDeviceAllocator::Default() {
  static HeapDeviceAllocator* a = new HeapDeviceAllocator();
  return a;
}

}  // namespace vismoe
