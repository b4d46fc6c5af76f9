#include "engine/offload/resident_expert_provider.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_spec.h"

namespace vismoe {

absl::StatusOr<std::unique_ptr<ResidentExpertProvider>> ResidentExpertProvider::Create(
    const Checkpoint& checkpoint, const TextConfig& config, const ExpertNaming& naming) {
  std::unique_ptr<ResidentExpertProvider> p(new ResidentExpertProvider());
  const int64_t e = config.num_experts;
  const int64_t h = config.hidden_size;
  const int64_t i = config.moe_intermediate_size;
  p->num_experts_ = config.num_experts;
  p->layers_.resize(config.num_hidden_layers);
  bool layout_known = false;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    if (!config.IsMoeLayer(l)) continue;
    const std::string base = naming.LayerPrefix(l);
    LayerWeights& lw = p->layers_[l];
    if (config.mxfp4.has_value()) {
      p->layout_ = ExpertWeights::Layout::kFused;
      VISMOE_ASSIGN_OR_RETURN(lw.gate_up,
                              checkpoint.GetMxfp4(base + kFusedGateUpName, {e, 2 * i, h}));
      VISMOE_ASSIGN_OR_RETURN(lw.down, checkpoint.GetMxfp4(base + kFusedDownName, {e, h, i}));
      continue;
    }
    const bool fused = checkpoint.Has(base + kFusedGateUpName);
    if (layout_known && fused != (p->layout_ == ExpertWeights::Layout::kFusedTransposed)) {
      return absl::InvalidArgumentError(absl::StrCat(checkpoint.dir(), ": layer ", l,
                                                     " mixes fused and per-expert expert layouts"));
    }
    layout_known = true;
    if (fused) {
      p->layout_ = ExpertWeights::Layout::kFusedTransposed;
      VISMOE_ASSIGN_OR_RETURN(lw.gate_up, checkpoint.Get(base + kFusedGateUpName, {e, h, 2 * i}));
      VISMOE_ASSIGN_OR_RETURN(lw.down, checkpoint.Get(base + kFusedDownName, {e, i, h}));
      continue;
    }
    p->layout_ = ExpertWeights::Layout::kSeparate;
    for (int x = 0; x < e; ++x) {
      const std::string eb = absl::StrCat(base, x, ".");
      ExpertWeights w;
      w.layout = ExpertWeights::Layout::kSeparate;
      const std::optional<QuantBlock> block = Fp8Block(config);
      VISMOE_ASSIGN_OR_RETURN(w.gate, checkpoint.GetLinear(eb + naming.gate, {i, h}, block));
      VISMOE_ASSIGN_OR_RETURN(w.up, checkpoint.GetLinear(eb + naming.up, {i, h}, block));
      VISMOE_ASSIGN_OR_RETURN(w.down, checkpoint.GetLinear(eb + naming.down, {h, i}, block));
      lw.experts.push_back(w);
    }
  }
  return p;
}

absl::Status ResidentExpertProvider::CheckIds(int layer, int expert) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()) ||
      (layers_[layer].gate_up.empty() && layers_[layer].experts.empty())) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " is not a MoE layer"));
  }
  if (expert < 0 || expert >= num_experts_) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": expert ", expert,
                                                   " out of range [0, ", num_experts_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ResidentExpertProvider::BeginLayer(Phase, int layer,
                                                                    absl::Span<const int> experts) {
  for (int x : experts) VISMOE_RETURN_IF_ERROR(CheckIds(layer, x));
  return std::vector<int>(experts.begin(), experts.end());
}

absl::StatusOr<ExpertWeights> ResidentExpertProvider::Acquire(int layer, int expert) {
  VISMOE_RETURN_IF_ERROR(CheckIds(layer, expert));
  ++queries_;
  if (stats_ != nullptr) stats_->OnExpertQuery(phase_, layer, /*hit=*/true);
  const LayerWeights& lw = layers_[layer];
  if (layout_ == ExpertWeights::Layout::kSeparate) return lw.experts[expert];
  ExpertWeights w;
  w.layout = layout_;
  w.gate_up = lw.gate_up.Row(expert);
  w.down = lw.down.Row(expert);
  return w;
}

}  // namespace vismoe
