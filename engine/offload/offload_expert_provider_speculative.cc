// OffloadExpertProvider's part in speculative execution
// (engine/core/speculative_execution.h): pinning an expert of a layer ahead
// while the running layer waits on a copy.
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/offload/offload_expert_provider.h"
#include "spdlog/spdlog.h"

namespace vismoe {

absl::StatusOr<ExpertWeights> OffloadExpertProvider::AcquireIfResident(int layer, int expert) {
  VISMOE_RETURN_IF_ERROR(CheckIds(layer, expert));
  if (kind_[layer] == Kind::kPinned) {
    return store_format_pinned_.View(pinned_[layer] + static_cast<size_t>(expert) * pinned_stride_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (layer == current_layer_) {
    return absl::FailedPreconditionError(absl::StrCat("AcquireIfResident(", layer, ", ", expert,
                                                      ") of the running layer: use Acquire"));
  }
  const int slot = cache_->Find(layer, expert);
  if (slot < 0 || cache_->slot(slot).in_flight) {
    return absl::NotFoundError(absl::StrCat("layer ", layer, " expert ", expert,
                                            slot < 0 ? " is not cached" : " is still copying"));
  }
  cache_->Pin(slot);  // never a victim while computed on
  return store_->format().View(SlabData(slot));
}

void OffloadExpertProvider::ReleaseResident(int layer, int expert) {
  if (!CheckIds(layer, expert).ok() || kind_[layer] == Kind::kPinned) return;
  std::lock_guard<std::mutex> lock(mu_);
  const int slot = cache_->Find(layer, expert);
  if (slot < 0 || cache_->slot(slot).pins == 0) {
    spdlog::error("offload: ReleaseResident({}, {}) without a matching AcquireIfResident", layer,
                  expert);
    return;
  }
  cache_->Unpin(slot);
  // A demand miss of the running layer may have found no slab but this one.
  DispatchDemandLocked();
  cv_.notify_all();
}

}  // namespace vismoe
