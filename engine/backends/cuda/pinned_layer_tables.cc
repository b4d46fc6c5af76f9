#include "engine/backends/cuda/pinned_layer_tables.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"

namespace vismoe::cuda {
namespace {

bool Usable(const TensorView& t) {
  return t.dtype == DType::kBF16 && t.data != nullptr &&
         reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}

}  // namespace

absl::StatusOr<PinnedLayerTables> PinnedLayerTables::Create(int num_layers, int num_experts) {
  if (num_layers < 0 || num_experts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PinnedLayerTables: ", num_layers, " layers of ", num_experts, " experts"));
  }
  PinnedLayerTables t;
  t.num_experts_ = num_experts;
  VISMOE_ASSIGN_OR_RETURN(t.device_, DeviceBuffer::Allocate(static_cast<size_t>(num_layers) * 3 *
                                                            num_experts * sizeof(const Bf16*)));
  t.owner_.assign(num_layers, 0);
  t.usable_.assign(num_layers, 0);
  t.tables_.assign(num_layers, MoeDecodeTable{});
  return t;
}

absl::StatusOr<const MoeDecodeTable*> PinnedLayerTables::Get(int layer, ExpertProvider& experts,
                                                             const Stream& stream) {
  if (layer < 0 || layer >= static_cast<int>(owner_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("PinnedLayerTables: no layer ", layer));
  }
  if (owner_[layer] == experts.instance_id()) {
    return usable_[layer] ? &tables_[layer] : nullptr;
  }
  const int e_count = num_experts_;
  std::vector<const Bf16*> host(3 * static_cast<size_t>(e_count), nullptr);
  bool usable = true;
  std::optional<ExpertWeights::Layout> layout;
  for (int e = 0; e < e_count && usable; ++e) {
    VISMOE_ASSIGN_OR_RETURN(const ExpertWeights w, experts.PinnedWeights(layer, e));
    if (layout.has_value() && *layout != w.layout) usable = false;
    layout = w.layout;
    const bool fused = w.layout == ExpertWeights::Layout::kFusedTransposed;
    usable =
        usable && Usable(w.down) && (fused ? Usable(w.gate_up) : Usable(w.gate) && Usable(w.up));
    if (!usable) break;
    host[e] = static_cast<const Bf16*>(fused ? w.gate_up.data : w.gate.data);
    host[e_count + e] = fused ? nullptr : static_cast<const Bf16*>(w.up.data);
    host[2 * e_count + e] = static_cast<const Bf16*>(w.down.data);
  }
  if (owner_[layer] != 0) VISMOE_RETURN_IF_ERROR(stream.Synchronize());
  owner_[layer] = experts.instance_id();
  usable_[layer] = usable ? 1 : 0;
  if (!usable) return nullptr;
  const Bf16** dev = device_.as<const Bf16*>() + static_cast<size_t>(layer) * 3 * e_count;
  VISMOE_RETURN_IF_ERROR(CopyToDevice(dev, host.data(), host.size() * sizeof(const Bf16*)));
  MoeDecodeTable& t = tables_[layer];
  t.layout = *layout == ExpertWeights::Layout::kFusedTransposed ? WeightLayout::kInOut
                                                                : WeightLayout::kOutIn;
  t.gate_up = dev;
  t.up = dev + e_count;
  t.down = dev + 2 * e_count;
  return &t;
}

}  // namespace vismoe::cuda
