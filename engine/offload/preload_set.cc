#include "engine/offload/preload_set.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"

namespace vismoe {

absl::Status CheckPreloadOptions(const OffloadOptions& o) {
  if (!PolicyFromName<PreloadKind>(o.preload).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "preload must be one of ", PolicyNames<PreloadKind>(", "), "; got '", o.preload, "'"));
  }
  if (o.preload_experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "preload_experts must be >= 0 (0 = the model's top-k), got ", o.preload_experts));
  }
  if (!(o.preload_share > 0 && o.preload_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("preload_share must be in (0, 1], got ", o.preload_share));
  }
  return absl::OkStatus();
}

PreloadSet::PreloadSet(int num_slabs, double share, int num_experts,
                       std::vector<int> offloaded_layers)
    : num_slabs_(std::max(num_slabs, 0)),
      share_(share),
      num_experts_(num_experts),
      offloaded_(std::move(offloaded_layers)) {
  std::sort(offloaded_.begin(), offloaded_.end());
}

void PreloadSet::Set(uint64_t owner, const std::vector<std::vector<int>>& preferred) {
  // Each offloaded layer's valid, distinct ids in their order, then rank by rank.
  std::vector<std::vector<int>> by_layer;
  size_t depth = 0;
  for (int l : offloaded_) {
    std::vector<int>& ids = by_layer.emplace_back();
    if (l >= static_cast<int>(preferred.size())) continue;
    for (int e : preferred[l]) {
      if (e >= 0 && e < num_experts_ && std::find(ids.begin(), ids.end(), e) == ids.end()) {
        ids.push_back(e);
      }
    }
    depth = std::max(depth, ids.size());
  }
  std::vector<std::pair<int, int>> order;
  for (size_t rank = 0; rank < depth; ++rank) {
    for (size_t i = 0; i < offloaded_.size(); ++i) {
      if (rank < by_layer[i].size()) order.push_back({offloaded_[i], by_layer[i][rank]});
    }
  }
  for (auto& [o, list] : lists_) {
    if (o == owner) {
      list = std::move(order);
      return;
    }
  }
  lists_.push_back({owner, std::move(order)});
}

void PreloadSet::Erase(uint64_t owner) {
  lists_.erase(std::remove_if(lists_.begin(), lists_.end(),
                              [owner](const auto& entry) { return entry.first == owner; }),
               lists_.end());
}

int PreloadSet::Quota() const {
  if (lists_.empty()) return 0;
  // The small epsilon keeps e.g. 0.3 * 10 from flooring to 2.
  return static_cast<int>(std::floor(share_ * num_slabs_ / owners() + 1e-9));
}

std::vector<std::pair<int, int>> PreloadSet::Protected() const {
  const size_t quota = static_cast<size_t>(Quota());
  std::vector<std::pair<int, int>> out;
  absl::flat_hash_set<int64_t> seen;
  for (const auto& [owner, list] : lists_) {
    for (size_t i = 0; i < std::min(quota, list.size()); ++i) {
      const auto [l, e] = list[i];
      if (seen.insert((static_cast<int64_t>(l) << 32) | static_cast<uint32_t>(e)).second) {
        out.push_back(list[i]);
      }
    }
  }
  return out;
}

}  // namespace vismoe
