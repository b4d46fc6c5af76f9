// OffloadExpertProvider's host execution (offload_expert_provider.h): which
// misses are computed on the host instead of copied -- the last
// --host_moe_layers MoE layers always, and under --miss_policy=cpu a miss whose
// measured host time for its tokens is below its copy time -- and the host
// weights they read. The rest of the provider is offload_expert_provider.cc.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "engine/offload/offload_expert_provider.h"  // IWYU pragma: associated

namespace vismoe {

absl::Status OffloadExpertProvider::SetUpHostExecution(const OffloadOptions& options) {
  const std::optional<MissPolicy> miss = PolicyFromName<MissPolicy>(options.miss_policy);
  if (!miss.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("miss policy must be one of ",
                                                   PolicyNames<MissPolicy>(", "), "; got '",
                                                   options.miss_policy, "'"));
  }
  miss_policy_ = *miss;
  const std::vector<int>& offloaded = plan_.offloaded_layer_ids;
  const int n = options.host_moe_layers;
  if (n < 0 || n > static_cast<int>(offloaded.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_moe_layers=", n, ": must be in [0, ", offloaded.size(),
        "], the MoE layers outside the pinned prefix of ", plan_.pinned_layer_ids.size()));
  }
  host_layer_.assign(kind_.size(), 0);
  for (int i = 0; i < n; ++i) host_layer_[offloaded[offloaded.size() - 1 - i]] = 1;
  return absl::OkStatus();
}

bool OffloadExpertProvider::HostComputesLocked(int layer, int64_t tokens) const {
  if (host_layer_[layer]) return true;
  if (miss_policy_ != MissPolicy::kCpu) return false;
  return host_cost_.PreferHost(tokens, CopySecondsLocked());
}

double OffloadExpertProvider::CopySecondsLocked() const {
  // Measured over every copy so far (the throttle included); before the
  // first, the configured throttle; unknown (0) without either.
  double bandwidth = transfer_->MeasuredBandwidth();
  if (!(bandwidth > 0)) bandwidth = options_.copy_bandwidth_bytes_per_s;
  return bandwidth > 0 ? static_cast<double>(stride_) / bandwidth : 0.0;
}

void OffloadExpertProvider::CountHostLocked(uint64_t count) {
  if (count == 0) return;
  const uint64_t bytes = count * stride_;
  request_.experts_host_computed += count;
  request_.bytes_not_copied += bytes;
  sink_->OnExpertsHostComputed(count, bytes);
}

absl::StatusOr<ExpertWeights> OffloadExpertProvider::HostWeights(int layer, int expert) {
  VISMOE_RETURN_IF_ERROR(CheckIds(layer, expert));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (layer != current_layer_ ||
        std::find(on_host_.begin(), on_host_.end(), expert) == on_host_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("HostWeights(", layer, ", ", expert,
                       ") of an expert this layer's plan did not put on "
                       "the host"));
    }
  }
  return store_->Weights(layer, expert);  // the store is immutable
}

void OffloadExpertProvider::OnHostExpertTime(int64_t tokens, double seconds) {
  if (miss_policy_ != MissPolicy::kCpu) return;
  std::lock_guard<std::mutex> lock(mu_);
  host_cost_.Record(tokens, seconds);
}

std::optional<double> OffloadExpertProvider::HostSecondsEstimate(int64_t tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_cost_.EstimateSeconds(tokens);
}

double OffloadExpertProvider::CopySecondsEstimate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CopySecondsLocked();
}

}  // namespace vismoe
