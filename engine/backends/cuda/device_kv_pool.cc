#include "engine/backends/cuda/device_kv_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe::cuda {

absl::StatusOr<std::unique_ptr<DeviceKvPool>> DeviceKvPool::Create(int num_layers, int64_t blocks,
                                                                   int64_t block_tokens,
                                                                   int64_t row_elems, int planes) {
  if (num_layers <= 0 || blocks <= 0 || blocks > INT32_MAX || block_tokens <= 0 || row_elems <= 0 ||
      (planes != 1 && planes != 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceKvPool: bad shape layers=", num_layers, " blocks=", blocks,
                     " block_tokens=", block_tokens, " row=", row_elems, " planes=", planes));
  }
  const size_t bytes = static_cast<size_t>(num_layers) * planes * static_cast<size_t>(blocks) *
                       static_cast<size_t>(block_tokens) * static_cast<size_t>(row_elems) *
                       sizeof(Bf16);
  absl::StatusOr<DeviceBuffer> rows = DeviceBuffer::Allocate(bytes);
  if (!rows.ok()) {
    return absl::Status(rows.status().code(),
                        absl::StrCat("KV pool of ", blocks, " blocks of ", block_tokens,
                                     " tokens (", bytes, " bytes): ", rows.status().message()));
  }
  VISMOE_ASSIGN_OR_RETURN(DeviceBuffer tables,
                          DeviceBuffer::Allocate(static_cast<size_t>(blocks) * sizeof(int32_t)));
  return std::unique_ptr<DeviceKvPool>(new DeviceKvPool(
      num_layers, blocks, block_tokens, row_elems, planes, std::move(*rows), std::move(tables)));
}

}  // namespace vismoe::cuda
