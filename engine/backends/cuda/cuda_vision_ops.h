// CudaVisionOps: the VisionOps of the CUDA backend -- the computation of the
// CPU reference (engine/backends/cpu/cpu_vision_ops.h) with bf16 activations
// and fp32 accumulation, every op an engine/ops/cuda kernel or a cuBLAS GEMM
// on the ops' stream; the tower over them (engine/arch/qwen3_vl_vision.h)
// returns the same host fp32 VisionOutput as on the CPU.
//
// BeginStep: the position embeddings the tower resampled (plus the patch
// bias) and its rotary tables are uploaded; the patch embedding is a GEMM
// accumulated onto them (beta = 1), run in chunks of rows through a fixed
// staging buffer. Attention: LayerNorm -> qkv GEMM + bias -> rotary on q and
// k -> bidirectional attention per frame -> proj GEMM accumulated onto the
// residual (+ bias). Mlp: LayerNorm -> fc1 + bias -> GELU -> fc2 accumulated
// onto the residual (+ bias). The 2x2 merge is a view (patches come in
// merge-block order: [n, hidden] is [n / 4, 4 * hidden]). Mergers end in an
// fp32 GEMM downloaded behind it; their fc2 bias is added on the host in
// Finish. Saliency: the per-key attention probabilities per frame
// (cuda::AttentionKeySaliency, deterministic).
//
// Memory: every vision weight is converted to bf16 and uploaded once at
// Create; a step's buffers come from one DeviceArena sized for
// Options::max_patches and reset at each BeginStep, so a step never allocates
// device memory. device_bytes() is what the ops hold on the device.
//
// Differences from the CPU reference, by design: bf16 activations and patch
// inputs (transformers on a GPU runs bf16 too), the biases of the residual
// GEMMs added after the accumulation (two bf16 roundings).
// Thread safety: immutable after Create(); a VisionStep holds the ops' lock
// for its life (one stream, one scratch arena), so steps are serialised.
// Ownership: owns its device weights, scratch, stream and cuBLAS handle; the
// Checkpoint is read only during Create.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_CUDA_VISION_OPS_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_CUDA_VISION_OPS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/vision_ops.h"
#include "engine/core/tensor.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/ops/cuda/gemm.h"

namespace vismoe::cuda {

class CudaVisionOps final : public VisionOps {
 public:
  struct Options {
    int device = 0;
    // The most patches one step may carry (all images of a request): sizes
    // the scratch arena. A request's patches are at most merge^2 times its
    // visual tokens.
    int64_t max_patches = 16384;
  };

  // Checks the config, reads and validates every vision tensor (VisionWeights:
  // errors name the tensor), uploads them, creates the stream, cuBLAS handle
  // and scratch. kUnavailable without a device; kResourceExhausted when the
  // device cannot hold them; InvalidArgument for a bad config or options.
  static absl::StatusOr<std::unique_ptr<CudaVisionOps>> Create(const ModelConfig& config,
                                                               const Checkpoint& checkpoint,
                                                               const Options& options);
  CudaVisionOps(const CudaVisionOps&) = delete;
  CudaVisionOps& operator=(const CudaVisionOps&) = delete;
  ~CudaVisionOps() override;

  // Device bytes of a step's scratch for `max_patches` patches.
  static int64_t ScratchBytes(const ModelConfig& config, int64_t max_patches);

  const char* name() const override { return "cuda"; }
  const TensorView& position_table() const override { return pos_table_; }
  // InvalidArgument naming max_patches when `patches` exceed it.
  absl::Status CheckPatches(int64_t patches) const override;
  int64_t device_scratch_bytes() const override { return device_bytes() - weight_bytes(); }
  absl::StatusOr<std::unique_ptr<VisionStep>> BeginStep(
      const VisionStepInput& input) const override;

  int64_t max_patches() const { return max_patches_; }
  int64_t weight_bytes() const { return static_cast<int64_t>(weights_.size()); }
  int64_t scratch_bytes() const { return static_cast<int64_t>(scratch_.capacity()); }
  // Everything the ops hold on the device: weights, scratch, cuBLAS workspace.
  int64_t device_bytes() const {
    return weight_bytes() + scratch_bytes() + static_cast<int64_t>(blas_workspace_.size());
  }

 private:
  struct Block {
    const Bf16 *norm1_w = nullptr, *norm1_b = nullptr, *norm2_w = nullptr, *norm2_b = nullptr;
    const Bf16 *qkv_w = nullptr, *qkv_b = nullptr, *proj_w = nullptr, *proj_b = nullptr;
    const Bf16 *fc1_w = nullptr, *fc1_b = nullptr, *fc2_w = nullptr, *fc2_b = nullptr;
  };
  struct Merger {
    const Bf16 *norm_w = nullptr, *norm_b = nullptr, *fc1_w = nullptr, *fc1_b = nullptr;
    const Bf16* fc2_w = nullptr;
    std::vector<float> fc2_b;  // host fp32: added after the fp32 download
  };
  class Step;  // one step's device buffers and ops (the .cc)

  explicit CudaVisionOps(const VisionConfig& config) : config_(config) {}
  // Uploads the packed bf16 weights and points the blocks and mergers into them.
  absl::Status UploadWeights(const ModelConfig& config, const Checkpoint& checkpoint);

  VisionConfig config_;
  int device_ = 0;
  int64_t max_patches_ = 0;
  DeviceBuffer weights_;           // every vision tensor, bf16
  const Bf16* patch_w_ = nullptr;  // [hidden, patch_dim]
  std::vector<float> patch_b_;     // host fp32 [hidden]
  std::vector<float> pos_embed_;   // host fp32 [num_position_embeddings, hidden]
  TensorView pos_table_;           // a view of pos_embed_
  std::vector<Block> blocks_;
  Merger merger_;
  std::vector<Merger> deepstack_;

  mutable std::mutex mu_;  // held by a Step for its life: the members below are per step
  mutable Stream stream_;
  DeviceBuffer blas_workspace_;  // declared before blas_: outlives the handle bound to it
  mutable std::unique_ptr<Blas> blas_;
  mutable DeviceArena scratch_{nullptr, 0};  // owns its block once Create sets it
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_CUDA_VISION_OPS_H_
