// DeviceKvPool: the CUDA backend's KV pool. The free list and the block
// arithmetic are KvPool's (engine/backend/kv_pool.h); the rows are bf16 in one
// device allocation made once, at construction, laid out
// [layer][K|V][block][block_tokens][row_elems] like the host pool's, so block b
// of a layer's keys starts b * block_elems() elements after Keys(layer); a
// pool of one plane (latent attention: KvPool::planes()) has keys only.
// A step uploads the block tables of its sequences into `tables()`, one
// device int32 per block of the pool: the tables of one step's sequences
// never hold more blocks than the pool has, as no block is in two caches.
// Thread safety: as KvPool; the device memory is used by the decoder's
// steps, which are serialised.
// Ownership: owns its device memory.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_DEVICE_KV_POOL_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_DEVICE_KV_POOL_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/backend/kv_pool.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

class DeviceKvPool final : public KvPool {
 public:
  // InvalidArgument for a bad shape (planes 1 or 2); kResourceExhausted
  // (from cudaMalloc) when the device cannot hold it.
  static absl::StatusOr<std::unique_ptr<DeviceKvPool>> Create(int num_layers, int64_t blocks,
                                                              int64_t block_tokens,
                                                              int64_t row_elems, int planes = 2);

  // Block 0 of layer `layer`'s keys / values. REQUIRES (Values): planes() == 2.
  Bf16* Keys(int layer) const { return Plane(layer, 0); }
  Bf16* Values(int layer) const { return Plane(layer, 1); }
  // Device room for total_blocks() block ids.
  int32_t* tables() const { return tables_.as<int32_t>(); }
  int64_t block_bytes() const override {
    return planes() * int64_t{num_layers()} * block_elems() * static_cast<int64_t>(sizeof(Bf16));
  }

 private:
  DeviceKvPool(int num_layers, int64_t blocks, int64_t block_tokens, int64_t row_elems, int planes,
               DeviceBuffer rows, DeviceBuffer tables)
      : KvPool(num_layers, blocks, block_tokens, row_elems, NoHostRows{}, planes),
        rows_(std::move(rows)),
        tables_(std::move(tables)) {}
  Bf16* Plane(int layer, int kv) const {
    return rows_.as<Bf16>() +
           (static_cast<int64_t>(layer) * planes() + kv) * total_blocks() * block_elems();
  }

  DeviceBuffer rows_;
  DeviceBuffer tables_;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_DEVICE_KV_POOL_H_
