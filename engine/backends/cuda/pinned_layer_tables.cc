#include "engine/backends/cuda/pinned_layer_tables.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"

namespace vismoe::cuda {
namespace {

bool UsableBf16(const TensorView& t) {
  return t.dtype == DType::kBF16 && t.data != nullptr &&
         reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}

// An FP8 matrix the kernels read as it is: 8-byte loads inside one scale
// block, aligned fp32 or bf16 scales, the layer's block (`block`).
bool UsableFp8(const TensorView& t, const BlockScale& block) {
  const BlockScale& s = t.scale;
  return t.dtype == DType::kF8E4M3 && t.data != nullptr &&
         reinterpret_cast<uintptr_t>(t.data) % 8 == 0 && s.data != nullptr &&
         (s.dtype == DType::kF32 || s.dtype == DType::kBF16) &&
         reinterpret_cast<uintptr_t>(s.data) % DTypeSize(s.dtype) == 0 && s.rows > 0 &&
         s.cols > 0 && s.cols % 8 == 0 && s.SameBlocks(block);
}

// Slots of a layer's table: the weights' three pointer arrays, then the
// scales' three (FP8 only).
constexpr size_t kTableArrays = 6;

}  // namespace

absl::StatusOr<PinnedLayerTables> PinnedLayerTables::Create(int num_layers, int num_experts) {
  if (num_layers < 0 || num_experts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PinnedLayerTables: ", num_layers, " layers of ", num_experts, " experts"));
  }
  PinnedLayerTables t;
  t.num_experts_ = num_experts;
  VISMOE_ASSIGN_OR_RETURN(t.device_,
                          DeviceBuffer::Allocate(static_cast<size_t>(num_layers) * kTableArrays *
                                                 num_experts * sizeof(const void*)));
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
  const size_t e_count = static_cast<size_t>(num_experts_);
  std::vector<const void*> host(kTableArrays * e_count, nullptr);
  bool usable = true;
  std::optional<ExpertWeights::Layout> layout;
  std::optional<DType> dtype;
  std::optional<BlockScale> block;  // the first expert's: every part of every expert has it
  for (size_t e = 0; e < e_count && usable; ++e) {
    VISMOE_ASSIGN_OR_RETURN(const ExpertWeights w,
                            experts.PinnedWeights(layer, static_cast<int>(e)));
    if ((layout.has_value() && *layout != w.layout) ||
        (dtype.has_value() && *dtype != w.down.dtype)) {
      usable = false;
      break;
    }
    layout = w.layout;
    dtype = w.down.dtype;
    const bool fused = w.layout == ExpertWeights::Layout::kFusedTransposed;
    if (w.down.dtype == DType::kF8E4M3) {  // per-expert [out, in] matrices only
      if (!block.has_value()) block = w.gate.scale;
      usable = !fused && UsableFp8(w.gate, *block) && UsableFp8(w.up, *block) &&
               UsableFp8(w.down, *block);
      host[3 * e_count + e] = w.gate.scale.data;
      host[4 * e_count + e] = w.up.scale.data;
      host[5 * e_count + e] = w.down.scale.data;
    } else {
      usable = UsableBf16(w.down) &&
               (fused ? UsableBf16(w.gate_up) : UsableBf16(w.gate) && UsableBf16(w.up));
    }
    if (!usable) break;
    host[e] = fused ? w.gate_up.data : w.gate.data;
    host[e_count + e] = fused ? nullptr : w.up.data;
    host[2 * e_count + e] = w.down.data;
  }
  if (owner_[layer] != 0) VISMOE_RETURN_IF_ERROR(stream.Synchronize());
  owner_[layer] = experts.instance_id();
  usable_[layer] = usable ? 1 : 0;
  if (!usable) return nullptr;
  const void** dev =
      device_.as<const void*>() + static_cast<size_t>(layer) * kTableArrays * e_count;
  VISMOE_RETURN_IF_ERROR(CopyToDevice(dev, host.data(), host.size() * sizeof(const void*)));
  MoeDecodeTable& t = tables_[layer];
  t = MoeDecodeTable{};
  t.layout = *layout == ExpertWeights::Layout::kFusedTransposed ? WeightLayout::kInOut
                                                                : WeightLayout::kOutIn;
  // The kernels read FP8 weights through the same (bf16-typed) pointer arrays.
  const Bf16* const* weights = reinterpret_cast<const Bf16* const*>(dev);
  t.gate_up = weights;
  t.up = weights + e_count;
  t.down = weights + 2 * e_count;
  if (*dtype == DType::kF8E4M3) {
    t.fp8 = true;
    t.gate_scale = dev + 3 * e_count;
    t.up_scale = dev + 4 * e_count;
    t.down_scale = dev + 5 * e_count;
    t.scale_bf16 = block->dtype == DType::kBF16;
    t.block_rows = static_cast<int>(block->rows);
    t.block_cols = static_cast<int>(block->cols);
  }
  return &t;
}

}  // namespace vismoe::cuda
