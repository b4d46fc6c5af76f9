// Qwen3VlVisionCudaModel: the Qwen3-VL vision tower on the CUDA backend -- the
// computation of the CPU reference (engine/backends/cpu/qwen3_vl_vision.h) with bf16
// activations and fp32 accumulation, every op an engine/ops/cuda kernel or a
// cuBLAS GEMM on its own stream, and the same host fp32 VisionOutput, so the
// engine can run either tower (both are VisionTowers).
//
// Per Forward: the bilinearly resampled position embeddings (plus the patch
// bias) and the 2-D rotary cos/sin tables are computed on the host with the
// CPU tower's code (qwen3_vl_vision_tables.h) and uploaded; the patch
// embedding is a GEMM accumulated onto them (beta = 1), run in chunks of rows
// through a fixed staging buffer. Blocks: LayerNorm -> qkv GEMM + bias ->
// rotary on q and k -> bidirectional attention per frame -> proj GEMM
// accumulated onto the residual (+ bias) -> LayerNorm -> fc1 + bias -> GELU
// -> fc2 accumulated onto the residual (+ bias). The 2x2 merge is a view
// (patches come in merge-block order: [n, hidden] is [n / 4, 4 * hidden]).
// Mergers end in an fp32 GEMM whose bias is added on the host after the
// download. Saliency: the last block's per-key attention probabilities per
// frame (cuda::AttentionKeySaliency, deterministic), reduced per token on the
// host as the CPU tower does.
//
// Memory: every vision weight is converted to bf16 and uploaded once at
// Create; the per-Forward scratch is one DeviceArena sized for
// Options::max_patches and reset at each Forward, so Forward never allocates
// device memory. device_bytes() is what the tower holds on the device.
//
// Differences from the CPU reference, by design: bf16 activations and patch
// inputs (transformers on a GPU runs bf16 too), the biases of the residual
// GEMMs added after the accumulation (two bf16 roundings).
// Thread safety: immutable after Create(); Forward() calls are serialised
// internally (one stream, one scratch arena).
// Ownership: owns its device weights, scratch, stream and cuBLAS handle; the
// Checkpoint is read only during Create.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_QWEN3_VL_VISION_CUDA_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_QWEN3_VL_VISION_CUDA_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/vision_tower.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"
#include "engine/model/checkpoint.h"
#include "engine/model/grid_thw.h"
#include "engine/model/model_config.h"
#include "engine/ops/cuda/gemm.h"

namespace vismoe::cuda {

class Qwen3VlVisionCudaModel final : public VisionTower {
 public:
  struct Options {
    int device = 0;
    // The most patches one Forward may carry (all images of a request):
    // sizes the scratch arena. A request's patches are at most merge^2 times
    // its visual tokens.
    int64_t max_patches = 16384;
  };

  // Checks the config, reads and validates every vision tensor (VisionWeights:
  // the names and checks of the CPU tower; errors name the tensor), uploads them, creates the
  // stream, cuBLAS handle and scratch. kUnavailable without a device; kResourceExhausted when the
  // device cannot hold them; InvalidArgument for a bad config or options.
  static absl::StatusOr<std::unique_ptr<Qwen3VlVisionCudaModel>> Create(
      const ModelConfig& config, const Checkpoint& checkpoint, const Options& options);
  Qwen3VlVisionCudaModel(const Qwen3VlVisionCudaModel&) = delete;
  Qwen3VlVisionCudaModel& operator=(const Qwen3VlVisionCudaModel&) = delete;
  ~Qwen3VlVisionCudaModel() override;

  // Device bytes of the per-Forward scratch for `max_patches` patches.
  static int64_t ScratchBytes(const ModelConfig& config, int64_t max_patches);

  int64_t patch_dim() const override;
  // The contract of Qwen3VlVisionModel::Forward (same checks and messages,
  // same output layout). Also InvalidArgument when the grids carry more than
  // Options::max_patches patches.
  absl::StatusOr<VisionOutput> Forward(absl::Span<const float> patches,
                                       absl::Span<const GridThw> grids) const override;
  const char* backend() const override { return "cuda"; }

  int64_t max_patches() const { return max_patches_; }
  int64_t weight_bytes() const { return static_cast<int64_t>(weights_.size()); }
  int64_t scratch_bytes() const { return static_cast<int64_t>(scratch_.capacity()); }
  // Everything the tower holds on the device: weights, scratch, cuBLAS workspace.
  int64_t device_bytes() const {
    return weight_bytes() + scratch_bytes() + static_cast<int64_t>(blas_workspace_.size());
  }
  int64_t device_scratch_bytes() const override { return device_bytes() - weight_bytes(); }

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
  struct Step;  // one Forward's device buffers (the .cc)

  explicit Qwen3VlVisionCudaModel(const VisionConfig& config) : config_(config) {}
  absl::Status ForwardLocked(absl::Span<const float> patches, absl::Span<const GridThw> grids,
                             int64_t n, VisionOutput* out) const;
  absl::Status Embed(absl::Span<const float> patches, absl::Span<const GridThw> grids,
                     Step& s) const;
  absl::Status RunBlock(const Block& b, absl::Span<const GridThw> grids, bool last, Step& s) const;
  // Merges the residual stream [n, hidden] into out [n / merge^2, out_hidden]
  // fp32 on the device, without the fc2 bias.
  absl::Status RunMerger(const Merger& m, bool postshuffle_norm, Step& s, float* out) const;

  VisionConfig config_;
  int device_ = 0;
  int64_t max_patches_ = 0;
  DeviceBuffer weights_;           // every vision tensor, bf16
  const Bf16* patch_w_ = nullptr;  // [hidden, patch_dim]
  std::vector<float> patch_b_;     // host fp32 [hidden]
  std::vector<float> pos_embed_;   // host fp32 [num_position_embeddings, hidden]
  std::vector<Block> blocks_;
  Merger merger_;
  std::vector<Merger> deepstack_;

  mutable std::mutex mu_;  // serialises Forward: the members below are per call
  mutable Stream stream_;
  DeviceBuffer blas_workspace_;  // declared before blas_: outlives the handle bound to it
  mutable std::unique_ptr<Blas> blas_;
  mutable DeviceArena scratch_{nullptr, 0};  // owns its block once Create sets it
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_QWEN3_VL_VISION_CUDA_H_
