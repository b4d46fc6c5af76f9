#include <algorithm>

#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/pointer_table.h"

namespace vismoe::cuda {
namespace {

constexpr int kChunk = 448;  // 448 * 8 + 4 bytes of parameters, under 4 KiB

struct PointerChunk {
  const void* p[kChunk];
  int count;
};

__global__ void WritePointerChunkKernel(PointerChunk chunk, void** dst) {
  const int i = static_cast<int>(threadIdx.x);
  // cuBLAS takes A/B as const and C as mutable from the same kind of table.
  if (i < chunk.count) dst[i] = const_cast<void*>(chunk.p[i]);
}

}  // namespace

absl::Status WritePointerTable(absl::Span<const void* const> ptrs, void** dst,
                               StreamHandle stream) {
  for (size_t begin = 0; begin < ptrs.size(); begin += kChunk) {
    PointerChunk chunk;
    chunk.count = static_cast<int>(std::min<size_t>(kChunk, ptrs.size() - begin));
    std::copy_n(ptrs.begin() + begin, chunk.count, chunk.p);
    WritePointerChunkKernel<<<1, kChunk, 0, stream>>>(chunk, dst + begin);
    VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("WritePointerChunkKernel");
  }
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
