#include "engine/offload/memory_plan.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_spec.h"
#include "engine/offload/host_expert_store.h"

namespace vismoe {
namespace {

std::string MiB(int64_t bytes) {
  return absl::StrFormat("%d bytes (%.2f MiB)", bytes, static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

absl::StatusOr<ModelSizes> MeasureModelSizes(const Checkpoint& checkpoint, const TextConfig& config,
                                             const ExpertNaming& naming) {
  ModelSizes s;
  s.num_experts = config.num_experts;
  std::vector<std::string> expert_prefixes;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    if (!config.IsMoeLayer(l)) continue;
    s.moe_layers.push_back(l);
    expert_prefixes.push_back(naming.LayerPrefix(l));
  }
  // Experts are counted as ExpertFormat packs them: each tensor (weight or
  // scales) of one expert on its own aligned boundary, so the plan's slab is
  // the size of a slab.
  auto aligned = [](int64_t bytes) {
    const int64_t a = static_cast<int64_t>(kExpertPartAlign);
    return (bytes + a - 1) / a * a;
  };
  int64_t expert_total = 0;
  for (const std::string& name : checkpoint.Names()) {
    VISMOE_ASSIGN_OR_RETURN(const size_t bytes, checkpoint.StoredBytes(name));
    const std::string* prefix = nullptr;
    for (const std::string& p : expert_prefixes) {
      // GPT-OSS's expert biases stay resident (engine/model/gpt_oss.md).
      if (absl::StartsWith(name, p) && !absl::EndsWith(name, "_bias")) {
        prefix = &p;
        break;
      }
    }
    if (prefix != nullptr) {
      // "<prefix><j>.gate_proj.weight": one expert's; otherwise a layer's fused tensor.
      const bool per_expert =
          name.size() > prefix->size() && absl::ascii_isdigit(name[prefix->size()]);
      const int64_t e = config.num_experts;
      if (!per_expert && (e <= 0 || bytes % e != 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            checkpoint.dir(), ": ", name, " holds ", bytes, " bytes, not ", e, " experts' worth"));
      }
      expert_total += per_expert ? aligned(bytes) : e * aligned(bytes / e);
    } else {
      s.resident_bytes += static_cast<int64_t>(bytes);
    }
  }
  const int64_t n = static_cast<int64_t>(s.moe_layers.size()) * config.num_experts;
  if (n > 0) {
    if (expert_total == 0 || expert_total % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat(checkpoint.dir(),
                                                     ": routed expert tensors total ", expert_total,
                                                     " bytes, not a multiple of ", n, " experts"));
    }
    s.expert_bytes = expert_total / n;
  }
  return s;
}

std::string MemoryPlan::DebugString() const {
  return absl::StrCat("budget ", MiB(budget_bytes), ": resident ", MiB(resident_bytes),
                      ", pinned prefix ", pinned_layers, " MoE layers = ", MiB(pinned_prefix_bytes),
                      ", slab cache ", num_slabs, " x ", expert_bytes, " = ", MiB(slab_cache_bytes),
                      ", activations ", MiB(activation_bytes), ", kv cache ", MiB(kv_cache_bytes));
}

int MaxPinnedLayers(int64_t m_avail, int64_t c_safe_bytes, int64_t s_layer, int num_moe_layers) {
  if (m_avail < c_safe_bytes) return -1;
  if (s_layer <= 0) return num_moe_layers;
  return static_cast<int>(std::min<int64_t>((m_avail - c_safe_bytes) / s_layer, num_moe_layers));
}

int ChoosePinnedLayers(const PinnedPrefixProfile& profile, int max_valid) {
  const int lo = std::max(0, profile.l_semantic);
  if (lo > max_valid) return max_valid;
  int best = -1;
  for (int l = lo; l <= max_valid && l < static_cast<int>(profile.cost.size()); ++l) {
    if (best < 0 || profile.cost[l] < profile.cost[best]) best = l;
  }
  return best < 0 ? lo : best;
}

absl::StatusOr<MemoryPlan> MakeMemoryPlan(const ModelSizes& sizes,
                                          const MemoryPlanOptions& options) {
  MemoryPlan p;
  p.budget_bytes = options.budget_bytes;
  p.resident_bytes = sizes.resident_bytes;
  p.activation_bytes = options.activation_bytes;
  p.kv_cache_bytes = options.kv_cache_bytes;
  p.expert_bytes = sizes.expert_bytes;
  const int num_moe = static_cast<int>(sizes.moe_layers.size());
  const int64_t s_layer = sizes.expert_bytes * sizes.num_experts;
  if (options.budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu memory budget must be > 0 bytes, got ", options.budget_bytes));
  }
  if (options.min_cache_slabs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_cache_slabs must be >= 1, got ", options.min_cache_slabs));
  }
  if (options.pinned_layers < -1 || options.pinned_layers > num_moe) {
    return absl::InvalidArgumentError(absl::StrCat("pinned_layers must be -1 (auto) or in [0, ",
                                                   num_moe, "], got ", options.pinned_layers));
  }
  const int64_t fixed = p.resident_bytes + p.activation_bytes + p.kv_cache_bytes;
  const int64_t m_avail = options.budget_bytes - fixed;  // Eq. 10's M_avail
  const int64_t c_safe = options.min_cache_slabs * sizes.expert_bytes;
  int pinned = options.pinned_layers;
  if (pinned < 0) {
    if (m_avail >= num_moe * s_layer) {
      pinned = num_moe;  // everything fits: no offloading at all
    } else {
      const int max_valid = MaxPinnedLayers(m_avail, c_safe, s_layer, num_moe);
      pinned = max_valid < 0 ? 0 : ChoosePinnedLayers(options.profile, max_valid);
    }
  }
  p.pinned_layers = pinned;
  p.pinned_prefix_bytes = pinned * s_layer;
  for (int i = 0; i < num_moe; ++i) {
    (i < pinned ? p.pinned_layer_ids : p.offloaded_layer_ids).push_back(sizes.moe_layers[i]);
  }
  const int64_t offloaded_experts =
      static_cast<int64_t>(p.offloaded_layer_ids.size()) * sizes.num_experts;
  const int64_t need_slabs = offloaded_experts > 0 ? options.min_cache_slabs : 0;
  const int64_t minimum = fixed + p.pinned_prefix_bytes + need_slabs * sizes.expert_bytes;
  if (options.budget_bytes < minimum) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu memory budget of ", MiB(options.budget_bytes), " is too small: resident ",
        MiB(p.resident_bytes), " + activations ", MiB(p.activation_bytes), " + kv cache ",
        MiB(p.kv_cache_bytes), " + pinned prefix of ", pinned, " MoE layers ",
        MiB(p.pinned_prefix_bytes), " + ", need_slabs, " expert slab(s) of ", sizes.expert_bytes,
        " bytes needs at least ", MiB(minimum),
        " (the activations shrink with max_step_tokens and max_context_tokens, the kv cache with "
        "kv_cache_tokens or max_context_tokens, the pinned prefix with pinned_layers)"));
  }
  if (offloaded_experts > 0) {
    const int64_t left = options.budget_bytes - fixed - p.pinned_prefix_bytes;
    p.num_slabs = static_cast<int>(std::min<int64_t>(left / sizes.expert_bytes, offloaded_experts));
  }
  p.slab_cache_bytes = static_cast<int64_t>(p.num_slabs) * sizes.expert_bytes;
  return p;
}

}  // namespace vismoe
