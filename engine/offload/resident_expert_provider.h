// ResidentExpertProvider: serves every expert straight from the mmapped
// checkpoint (nothing to copy, nothing to evict). The provider the CPU backend
// uses when everything fits, and the baseline the offload runtime is checked
// against.
//
// Two published layouts are recognised per MoE layer (prefix P is
// "model.language_model." for Qwen3-VL-MoE, "model." for text MoEs):
//   fused     P layers.N.mlp.experts.gate_up_proj [E, H, 2I] and down_proj [E, I, H]
//             -> ExpertWeights::kFusedTransposed views of expert e's slices;
//   separate  P layers.N.mlp.experts.E.{gate,up}_proj.weight [I, H], down_proj [H, I]
//             -> ExpertWeights::kSeparate;
//   MXFP4     P layers.N.mlp.experts.{gate_up_proj,down_proj}_{blocks,scales}
//             (TextConfig::mxfp4, Checkpoint::GetMxfp4) [E, 2I, H] and [E, H, I]
//             -> ExpertWeights::kFused MXFP4 views.
// All shapes are checked in Create().
// Thread safety: as ExpertProvider (one forward thread); the views are immutable.
// Ownership: views point into `checkpoint`, which must outlive the provider.
#ifndef VISMOE_ENGINE_OFFLOAD_RESIDENT_EXPERT_PROVIDER_H_
#define VISMOE_ENGINE_OFFLOAD_RESIDENT_EXPERT_PROVIDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_provider.h"

namespace vismoe {

class ResidentExpertProvider final : public ExpertProvider {
 public:
  // `naming`: where the experts are (ArchSpec::experts; a text prefix such
  // as "model.language_model." names the Qwen families'). NotFound /
  // InvalidArgument (naming the tensor) when a MoE layer's experts are
  // missing or mis-shaped.
  static absl::StatusOr<std::unique_ptr<ResidentExpertProvider>> Create(
      const Checkpoint& checkpoint, const TextConfig& config, const ExpertNaming& naming);

  // Checks the ids and returns them unchanged (everything is usable).
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override;
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override;
  bool Ready(int, int) override { return true; }  // everything is resident
  void Release(int /*layer*/, int /*expert*/) override {}
  void EndLayer(int /*layer*/) override {}
  // Views point into the checkpoint, which outlives this provider.
  bool views_outlive_release() const override { return true; }

  ExpertWeights::Layout layout() const { return layout_; }

  // Every Acquire() is an expert lookup that hits (all experts are resident);
  // reported to `stats` (not owned; null = none) and counted here so the
  // engine can fill a request's OffloadStats.
  void set_stats(StatsSink* stats) { stats_ = stats; }
  uint64_t queries() const { return queries_; }

 private:
  ResidentExpertProvider() = default;
  absl::Status CheckIds(int layer, int expert) const;

  struct LayerWeights {
    TensorView gate_up;                  // fused: [E, H, 2I]; MXFP4 [E, 2I, H]
    TensorView down;                     // fused: [E, I, H]; MXFP4 [E, H, I]
    std::vector<ExpertWeights> experts;  // separate: one per expert
  };

  ExpertWeights::Layout layout_ = ExpertWeights::Layout::kFusedTransposed;
  StatsSink* stats_ = nullptr;
  Phase phase_ = Phase::kPrefill;  // of the current BeginLayer
  uint64_t queries_ = 0;
  int num_experts_ = 0;
  std::vector<LayerWeights> layers_;  // index = layer; empty for dense layers
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_RESIDENT_EXPERT_PROVIDER_H_
