// Synthetic weights: seeded random BF16 tensors for any supported config, so a
// model of any shape (up to Qwen3-VL-30B-A3B) can be run and measured without
// its checkpoint. The tensors have exactly the names and shapes the loaders
// read (the tensor list of engine/model/arch_spec.h, ExpectedTensors), so the
// same bytes move and the same kernels run as with the real weights; only the
// outputs are meaningless (random routing, random text).
//
// Values: matrices and non-norm biases ~ N(0, kSyntheticStd) (an Irwin-Hall
// approximation), norm weights 1, norm biases 0, which keeps the forward pass
// finite. Each tensor is filled in fixed-size chunks, each from its own
// splitmix64 stream seeded by (seed, tensor name, chunk index), so the bytes
// depend on the seed only, never on the thread count.
//
// Thread safety: free functions over their arguments.
#ifndef VISMOE_ENGINE_MODEL_SYNTHETIC_WEIGHTS_H_
#define VISMOE_ENGINE_MODEL_SYNTHETIC_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_routing.h"

namespace vismoe {

inline constexpr float kSyntheticStd = 0.02f;

// Byte totals of a spec list, computed without allocating anything.
struct SyntheticSizes {
  int64_t total_bytes = 0;
  int64_t expert_bytes_total = 0;  // all routed-expert tensors
  int64_t num_experts_total = 0;   // MoE layers x experts per layer
  int64_t expert_bytes = 0;        // one expert (gate + up + down)
};
absl::StatusOr<SyntheticSizes> MeasureSynthetic(const ModelConfig& config);

// Allocates every tensor of ExpectedTensors(config) in one block and fills it
// (on `pool` when non-null), then with kRealistic routing shapes it
// (synthetic_routing.h). The Checkpoint's dir() is `label`. Logs the total
// bytes. ResourceExhausted when the block exceeds physical memory or cannot be
// allocated; InvalidArgument for a bad config.
absl::StatusOr<std::unique_ptr<Checkpoint>> SynthesizeCheckpoint(
    const ModelConfig& config, uint64_t seed, ThreadPool* pool, const std::string& label,
    SyntheticRouting routing = SyntheticRouting::kRandom);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_SYNTHETIC_WEIGHTS_H_
