// CpuVisionOps: the VisionOps of the CPU reference backend. fp32 activations,
// weights read as stored (F32/F16/BF16 views into the checkpoint) by the
// engine/ops/cpu kernels. This is the exact path: the tower over these ops
// matches transformers' Qwen3VLMoeVisionModel, and every other backend is
// compared against it.
//
// Thread safety: immutable after Create(); steps may run concurrently (each
// step's kernels use the shared pool).
// Ownership: the weight views point into the Checkpoint, which must outlive
// the ops; the pool is not owned (null = the calling thread only).
#ifndef VISMOE_ENGINE_BACKENDS_CPU_CPU_VISION_OPS_H_
#define VISMOE_ENGINE_BACKENDS_CPU_CPU_VISION_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/vision_ops.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/vision_weights.h"

namespace vismoe::cpu {

class CpuVisionOps final : public VisionOps {
 public:
  // Reads and validates every vision tensor (VisionWeights) against the
  // config shapes. InvalidArgument / NotFound naming the tensor on a mismatch.
  static absl::StatusOr<std::unique_ptr<CpuVisionOps>> Create(const ModelConfig& config,
                                                              const Checkpoint& checkpoint,
                                                              ThreadPool* pool);

  const char* name() const override { return "cpu"; }
  const TensorView& position_table() const override { return weights_.pos_embed; }
  absl::StatusOr<std::unique_ptr<VisionStep>> BeginStep(
      const VisionStepInput& input) const override;

  const VisionConfig& config() const { return config_; }
  const VisionWeights& weights() const { return weights_; }
  ThreadPool* pool() const { return pool_; }

 private:
  CpuVisionOps(const VisionConfig& config, VisionWeights weights, ThreadPool* pool)
      : config_(config), weights_(std::move(weights)), pool_(pool) {}

  VisionConfig config_;
  VisionWeights weights_;  // patch_w viewed as the Linear [hidden, patch_dim]
  ThreadPool* pool_;
};

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_BACKENDS_CPU_CPU_VISION_OPS_H_
