// Where the offload runtime reads host experts from (OffloadOptions::
// host_experts): the mmapped checkpoint, or a packed second copy.
//
// A packed copy in page-locked memory (the CUDA backend) is what the DMA
// engine copies from at full bandwidth; a copy from mapped, pageable memory
// goes through the driver's bounce buffer. But a packed copy doubles the
// experts' host footprint (Qwen3-VL-30B-A3B: 58 GB twice; the first H100 run
// peaked at 120.6 GB RSS), and page-locked memory can be neither swapped nor
// reclaimed. So `auto` packs into page-locked memory only where that copy
// fits in the memory the host has available with room to spare, and maps the
// checkpoint otherwise; without page-locking (the CPU backend) a packed copy
// buys nothing and `auto` maps. `mapped` and `packed` force a side. Mapping
// needs a source whose views outlive the run and no dtype conversion; where it
// cannot, the store packs (HostExpertStore::Create).
// Thread safety: free functions, no state.
#ifndef VISMOE_ENGINE_OFFLOAD_HOST_STORE_MODE_H_
#define VISMOE_ENGINE_OFFLOAD_HOST_STORE_MODE_H_

#include <cstdint>

#include "engine/core/policy_names.h"

namespace vismoe {

// Bytes a packed page-locked copy must leave free: the larger of 4 GiB and a
// tenth of what was available (the server, the OS, the page cache of the
// checkpoint's other tensors).
int64_t PageLockedHeadroom(int64_t available_bytes);

// True when the host store should map the checkpoint rather than pack a copy.
// `page_locked`: a packed copy would be page-locked (the backend's host
// allocator). `packed_bytes`: the size of that copy. `available_bytes`: the
// host's available memory (MemAvailable), 0 when unknown (auto then packs, as
// it did before the mode existed).
bool MapHostExperts(HostStoreMode mode, bool page_locked, int64_t packed_bytes,
                    int64_t available_bytes);

// MemAvailable from /proc/meminfo in bytes; 0 where it cannot be read.
int64_t HostMemoryAvailable();

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_HOST_STORE_MODE_H_
