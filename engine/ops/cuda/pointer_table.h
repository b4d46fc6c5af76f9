// WritePointerTable: fills a device array of device pointers (the A/B/C
// arrays of a batched or grouped cuBLAS GEMM) from the host, through a
// kernel's by-value parameters instead of a memcpy.
//
// Why a kernel: the table is then stream-ordered like any other kernel
// output, so one small device buffer can be rewritten for every grouped GEMM
// while earlier GEMMs that read it are still queued, the host array is free
// as soon as the call returns, and nothing waits: a cudaMemcpyAsync from
// pageable memory synchronises the stream, and a pinned staging buffer would
// need its own lifetime tracking.
#ifndef VISMOE_ENGINE_OPS_CUDA_POINTER_TABLE_H_
#define VISMOE_ENGINE_OPS_CUDA_POINTER_TABLE_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// dst[i] = ptrs[i] for i < ptrs.size(), on `stream` (one launch per 448
// pointers: a kernel's parameters are limited to 4 KiB).
// REQUIRES: dst is device memory with room for ptrs.size() pointers.
absl::Status WritePointerTable(absl::Span<const void* const> ptrs, void** dst,
                               StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_POINTER_TABLE_H_
