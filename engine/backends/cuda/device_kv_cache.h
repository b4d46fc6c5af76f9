// DeviceKvCache: the CUDA backend's KV cache. The bookkeeping (length, per
// layer rows after token compression, CheckRoom/Advance) is KvCache's; the
// rows are bf16 in one device allocation made at construction, laid out
// [layer][K|V][capacity][num_kv_heads * head_dim], so a layer's keys are one
// contiguous block the attention kernel reads directly.
// Thread safety: none; owned by the one thread running the sequence.
// Ownership: owns its device memory.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_DEVICE_KV_CACHE_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_DEVICE_KV_CACHE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"
#include "engine/backend/kv_cache.h"

namespace vismoe::cuda {

class DeviceKvCache final : public KvCache {
 public:
  // kResourceExhausted (from cudaMalloc) when the device cannot hold it.
  static absl::StatusOr<std::unique_ptr<DeviceKvCache>> Create(int num_layers, int64_t capacity,
                                                               int64_t row_elems);
  DeviceKvCache(const DeviceKvCache&) = delete;
  DeviceKvCache& operator=(const DeviceKvCache&) = delete;

  // Row 0 of layer `layer`'s keys / values; rows are row_elems() apart.
  Bf16* Keys(int layer) const { return Base(layer, 0); }
  Bf16* Values(int layer) const { return Base(layer, 1); }
  int64_t bytes() const override { return static_cast<int64_t>(buffer_.size()); }

 private:
  DeviceKvCache(int num_layers, int64_t capacity, int64_t row_elems, DeviceBuffer buffer)
      : KvCache(num_layers, capacity, row_elems, NoHostRows{}), buffer_(std::move(buffer)) {}
  Bf16* Base(int layer, int kv) const {
    return buffer_.as<Bf16>() + (static_cast<int64_t>(layer) * 2 + kv) * capacity() * row_elems();
  }
  DeviceBuffer buffer_;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_DEVICE_KV_CACHE_H_
