#include "engine/backend/host_deferred_moe.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/offload/pinned_expert_view.h"

namespace vismoe {
namespace {

absl::Status CopyRows(DecoderStep& step, StepRows which, int64_t elems, std::vector<float>* out) {
  VISMOE_ASSIGN_OR_RETURN(const float* rows, step.HostRows(which));
  out->assign(rows, rows + elems);
  return absl::OkStatus();
}

}  // namespace

absl::Status HostDeferredMoe::Run(DecoderStep& step, int layer, Phase phase,
                                  ExpertProvider* experts, bool observed, int64_t elems) {
  if (!experts->LayerPinned(layer)) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeviceMoe(", layer, "): the provider does not pin the layer"));
  }
  Staged s;
  s.layer = layer;
  if (observed) VISMOE_RETURN_IF_ERROR(CopyRows(step, StepRows::kResidual, elems, &s.residual));
  VISMOE_RETURN_IF_ERROR(step.Route(layer, observed, &s.routing));
  if (observed) VISMOE_RETURN_IF_ERROR(CopyRows(step, StepRows::kNormed, elems, &s.normed));
  PinnedExpertView view(experts);
  VISMOE_RETURN_IF_ERROR(step.Experts(layer, phase, s.routing, &view));
  if (observed) VISMOE_RETURN_IF_ERROR(CopyRows(step, StepRows::kMoeOutput, elems, &s.moe_out));
  VISMOE_RETURN_IF_ERROR(step.AddMoeOutput());
  queue_.push_back(std::move(s));
  return absl::OkStatus();
}

absl::StatusOr<DeferredLayer> HostDeferredMoe::Take(int layer) {
  if (!Ready(layer)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TakeDeferred(", layer, "): not the oldest layer run on the device and not taken"));
  }
  taken_ = std::move(queue_.front());
  queue_.pop_front();
  DeferredLayer d;
  d.routing = taken_.routing;
  auto data = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  d.residual = data(taken_.residual);
  d.normed = data(taken_.normed);
  d.moe_out = data(taken_.moe_out);
  return d;
}

}  // namespace vismoe
