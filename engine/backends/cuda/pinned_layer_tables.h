// PinnedLayerTables: per decoder layer, the device table of a pinned layer's
// expert weights (MoeDecodeTable, engine/ops/cuda/moe_decode.h) that the CUDA
// decode step's MoE kernels read instead of asking the host. A layer's table
// is built from ExpertProvider::PinnedWeights the first time one provider's
// layer runs on the device, and rebuilt only for another provider
// (ExpertProvider::instance_id). bf16 experts (16-byte aligned) in either
// layout, and FP8 ones per expert [out, in] with fp32 or bf16 block scales
// (8-byte aligned, blocks of a multiple of 8 columns, the same for every
// part): a layer of others, or of mixed layouts or dtypes, gets none (it runs
// the host-driven way).
// Thread safety: none; used under the decoder ops' step lock.
// Ownership: owns the device tables; the weights stay the provider's.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_PINNED_LAYER_TABLES_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_PINNED_LAYER_TABLES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/device/cuda/device.h"
#include "engine/offload/expert_provider.h"
#include "engine/ops/cuda/moe_decode.h"

namespace vismoe::cuda {

class PinnedLayerTables {
 public:
  static absl::StatusOr<PinnedLayerTables> Create(int num_layers, int num_experts);
  PinnedLayerTables() = default;
  PinnedLayerTables(PinnedLayerTables&&) = default;
  PinnedLayerTables& operator=(PinnedLayerTables&&) = default;

  // The table of `layer`'s experts in `experts`, or null when the layer has
  // none it can use. Replacing a table built for another provider first
  // waits for `stream` (queued kernels may still read it).
  // REQUIRES: experts.LayerPinned(layer).
  absl::StatusOr<const MoeDecodeTable*> Get(int layer, ExpertProvider& experts,
                                            const Stream& stream);

 private:
  int num_experts_ = 0;
  // [layer][gate_up | up | down | gate scale | up scale | down scale][expert]
  DeviceBuffer device_;
  std::vector<uint64_t> owner_;  // per layer: the provider its table is of, 0 = none
  std::vector<char> usable_;     // per layer
  std::vector<MoeDecodeTable> tables_;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_PINNED_LAYER_TABLES_H_
