#include "engine/arch/qwen3_vl_vision.h"

#include <utility>
#include <vector>

#include "engine/backends/cpu/cpu_vision_ops.h"
#include "engine/core/status_macros.h"
#include "engine/model/qwen3_vl_vision_tables.h"

namespace vismoe {

absl::StatusOr<std::unique_ptr<Qwen3VlVisionModel>> Qwen3VlVisionModel::Create(
    const ModelConfig& config, std::unique_ptr<VisionOps> ops) {
  VISMOE_RETURN_IF_ERROR(CheckVisionConfig(config, "Qwen3VlVisionModel"));
  if (ops == nullptr) return absl::InvalidArgumentError("Qwen3VlVisionModel: no ops");
  return std::unique_ptr<Qwen3VlVisionModel>(new Qwen3VlVisionModel(config.vision, std::move(ops)));
}

absl::StatusOr<std::unique_ptr<Qwen3VlVisionModel>> Qwen3VlVisionModel::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, ThreadPool* pool) {
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<cpu::CpuVisionOps> ops,
                          cpu::CpuVisionOps::Create(config, checkpoint, pool));
  return Create(config, std::move(ops));
}

int64_t Qwen3VlVisionModel::patch_dim() const {
  return int64_t{config_.in_channels} * config_.temporal_patch_size * config_.patch_size *
         config_.patch_size;
}

absl::StatusOr<VisionOutput> Qwen3VlVisionModel::Forward(absl::Span<const float> patches,
                                                         absl::Span<const GridThw> grids) const {
  VisionOutput out;
  out.out_hidden = config_.out_hidden_size;
  VISMOE_ASSIGN_OR_RETURN(const int64_t n, CheckVisionInput(config_, patch_dim(), patches.size(),
                                                            grids, &out.tokens_per_image));
  VISMOE_RETURN_IF_ERROR(ops_->CheckPatches(n));
  out.num_tokens = n / (int64_t{config_.spatial_merge_size} * config_.spatial_merge_size);
  out.deepstack.assign(config_.deepstack_visual_indexes.size(), std::vector<float>());
  if (n == 0) return out;  // no images: nothing to run

  std::vector<float> position(static_cast<size_t>(n * config_.hidden_size), 0.0f);
  AddVisionPositionEmbedding(config_, ops_->position_table(), grids, position.data());
  std::vector<float> cos, sin;
  VisionRotaryTables(config_, grids, &cos, &sin);
  VisionStepInput in;
  in.patches = patches;
  in.grids = grids;
  in.position = position;
  in.cos = cos;
  in.sin = sin;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<VisionStep> step, ops_->BeginStep(in));
  VISMOE_RETURN_IF_ERROR(Run(*step, &out));
  return out;
}

absl::Status Qwen3VlVisionModel::Run(VisionStep& step, VisionOutput* out) const {
  const std::vector<int>& deepstack = config_.deepstack_visual_indexes;
  for (int i = 0; i < config_.depth; ++i) {
    VISMOE_RETURN_IF_ERROR(step.Attention(i, /*saliency=*/i + 1 == config_.depth));
    VISMOE_RETURN_IF_ERROR(step.Mlp(i));
    // An index past the last block leaves its feature empty.
    for (size_t k = 0; k < deepstack.size(); ++k) {
      if (deepstack[k] == i) VISMOE_RETURN_IF_ERROR(step.Merge(static_cast<int>(k), &out->deepstack[k]));
    }
  }
  VISMOE_RETURN_IF_ERROR(step.Merge(kFinalMerger, &out->embeds));
  std::vector<float> patch_saliency;
  VISMOE_RETURN_IF_ERROR(step.Finish(&patch_saliency));
  const int64_t unit = int64_t{config_.spatial_merge_size} * config_.spatial_merge_size;
  MergePatchSaliency(patch_saliency.data(), out->num_tokens, unit, &out->saliency);
  return absl::OkStatus();
}

}  // namespace vismoe
