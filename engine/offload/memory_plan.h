// MemoryPlan: how a device memory budget is split (VisMMOE 3.4, Fig. 7):
//   [resident: every non-expert tensor] [pinned prefix: all experts of the
//   first L_pinned MoE layers] [slab cache: N one-expert slabs]
//   [activations + KV cache].
// Pure arithmetic over sizes measured from a checkpoint (ModelSizes), so it is
// testable with plain numbers. L_pinned is set by flag or chosen by Eq. 10:
// valid L in [L_semantic, floor((M_avail - C_safe) / S_layer)], where M_avail
// is the budget left for experts and C_safe the memory kept for the slab cache;
// within that interval a calibration profile (cost per prefix depth) picks the
// cheapest L, and without one the most compact valid prefix is used.
// Thread safety: plain values.
#ifndef VISMOE_ENGINE_OFFLOAD_MEMORY_PLAN_H_
#define VISMOE_ENGINE_OFFLOAD_MEMORY_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"

namespace vismoe {

// Byte sizes of a model's parts.
struct ModelSizes {
  int64_t resident_bytes = 0;   // every tensor that is not a routed expert
  int64_t expert_bytes = 0;     // one routed expert (gate + up + down), packed
  std::vector<int> moe_layers;  // decoder layer indices with routed experts, ascending
  int num_experts = 0;          // per MoE layer
};

// Measures ModelSizes from the checkpoint's tensor table (no data is read).
// `naming`: where the experts are (ArchSpec::experts; a text prefix such as
// "model.language_model." names the Qwen families').
absl::StatusOr<ModelSizes> MeasureModelSizes(const Checkpoint& checkpoint, const TextConfig& config,
                                             const ExpertNaming& naming);

// Offline calibration result for Eq. 10.
struct PinnedPrefixProfile {
  int l_semantic = 0;  // minimum prefix depth whose routing context is informative
  // cost[L] = measured (or modelled) end-to-end cost with L pinned MoE layers;
  // may be shorter than the number of MoE layers (missing depths are not chosen).
  std::vector<double> cost;
};

struct MemoryPlanOptions {
  int64_t budget_bytes = 0;
  int pinned_layers = -1;        // -1 = choose by Eq. 10
  int64_t activation_bytes = 0;  // reserved for activations
  int64_t kv_cache_bytes = 0;    // reserved for the KV cache
  int min_cache_slabs = 1;       // C_safe, in slabs (>= 1 unless all layers pinned)
  PinnedPrefixProfile profile;   // used when pinned_layers == -1
};

struct MemoryPlan {
  int64_t budget_bytes = 0;
  int64_t resident_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t kv_cache_bytes = 0;
  int64_t expert_bytes = 0;              // = slab size
  int pinned_layers = 0;                 // number of MoE layers in the pinned prefix
  std::vector<int> pinned_layer_ids;     // decoder layer indices
  std::vector<int> offloaded_layer_ids;  // decoder layer indices served by the slab cache
  int64_t pinned_prefix_bytes = 0;
  int num_slabs = 0;  // 0 only when every MoE layer is pinned
  int64_t slab_cache_bytes = 0;
  int64_t total_bytes() const {
    return resident_bytes + pinned_prefix_bytes + slab_cache_bytes + activation_bytes +
           kv_cache_bytes;
  }
  // One line, for logs.
  std::string DebugString() const;
};

// Eq. 10: the largest prefix depth that leaves `c_safe_bytes` for the cache,
// i.e. floor((m_avail - c_safe) / s_layer), clamped to [0, num_moe_layers];
// -1 when m_avail < c_safe.
int MaxPinnedLayers(int64_t m_avail, int64_t c_safe_bytes, int64_t s_layer, int num_moe_layers);

// Picks L_pinned in Eq. 10's valid interval from `profile` (argmin cost, ties
// to the smaller L); without costs, the smallest valid L (L_semantic). When
// L_semantic exceeds the largest valid depth, the largest valid depth.
// REQUIRES: max_valid >= 0.
int ChoosePinnedLayers(const PinnedPrefixProfile& profile, int max_valid);

// Builds the plan. InvalidArgument naming the numbers when the budget cannot
// hold resident + activations + KV + pinned prefix + min_cache_slabs slabs,
// or when a forced pinned_layers is out of range.
absl::StatusOr<MemoryPlan> MakeMemoryPlan(const ModelSizes& sizes,
                                          const MemoryPlanOptions& options);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_MEMORY_PLAN_H_
