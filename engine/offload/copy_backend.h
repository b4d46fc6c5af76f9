// CopyBackend: how the TransferEngine's copy thread moves one contiguous
// expert block from the host store into the device arena. The CPU backend
// needs none (the TransferEngine does a memcpy, optionally throttled); the
// CUDA backend supplies one that issues cudaMemcpyAsync on its own copy
// stream and waits for that stream only (engine/device/cuda/cuda_copy_backend.h).
// Header-only so that vismoe_cuda can implement it without linking the engine.
// Thread safety: Copy() is called from the TransferEngine's one copy thread
// only; an implementation need not be re-entrant. name() from any thread.
// Ownership: the TransferEngine borrows the backend; it must outlive it.
#ifndef VISMOE_ENGINE_OFFLOAD_COPY_BACKEND_H_
#define VISMOE_ENGINE_OFFLOAD_COPY_BACKEND_H_

#include <cstddef>

#include "absl/status/status.h"

namespace vismoe {

// One piece of a gathered copy: `bytes` from `src` to the destination block
// at `dst_offset` (an expert served from the mapped checkpoint is two or three
// tensors in different places; see HostExpertStore).
struct CopySegment {
  const void* src = nullptr;
  size_t dst_offset = 0;
  size_t bytes = 0;
};

class CopyBackend {
 public:
  virtual ~CopyBackend() = default;

  // Copies `bytes` from `src` to `dst` and returns once they are in place
  // (blocking from the copy thread's point of view; the compute thread only
  // ever waits on a per-expert completion). A non-OK status means `dst` holds
  // no usable copy; the TransferEngine reports the request as not completed.
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // Short name for logs ("cuda-h2d").
  virtual const char* name() const = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_COPY_BACKEND_H_
