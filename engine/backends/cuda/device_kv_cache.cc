#include "engine/backends/cuda/device_kv_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace vismoe::cuda {

absl::StatusOr<std::unique_ptr<DeviceKvCache>> DeviceKvCache::Create(int num_layers,
                                                                     int64_t capacity,
                                                                     int64_t row_elems) {
  if (num_layers <= 0 || capacity <= 0 || row_elems <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceKvCache: bad shape layers=", num_layers,
                                                   " capacity=", capacity, " row=", row_elems));
  }
  const size_t bytes = static_cast<size_t>(num_layers) * 2 * static_cast<size_t>(capacity) *
                       static_cast<size_t>(row_elems) * sizeof(Bf16);
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(bytes);
  if (!buffer.ok()) {
    return absl::Status(buffer.status().code(),
                        absl::StrCat("KV cache of ", capacity, " tokens (", bytes,
                                     " bytes): ", buffer.status().message()));
  }
  return std::unique_ptr<DeviceKvCache>(
      new DeviceKvCache(num_layers, capacity, row_elems, std::move(*buffer)));
}

}  // namespace vismoe::cuda
