#include "engine/backends/cuda/op_timer.h"

#include <utility>

#include "engine/core/status_macros.h"

namespace vismoe::cuda {

const char* OpTimer::Name(Family family) {
  switch (family) {
    case Family::kEmbed:
      return "embed";
    case Family::kNorm:
      return "norm";
    case Family::kAttention:
      return "attention";
    case Family::kRouter:
      return "router";
    case Family::kExperts:
      return "experts";
    case Family::kDenseMlp:
      return "dense_mlp";
    case Family::kLogits:
      return "logits";
    case Family::kOther:
      break;
  }
  return "other";
}

void OpTimer::Mark(Family family, StreamHandle stream) {
  if (marks_.size() == events_.size()) {
    absl::StatusOr<Event> e = Event::Create(/*timing=*/true);
    if (!e.ok()) return;  // an unmeasured op counts to the one before it
    events_.push_back(*std::move(e));
  }
  if (!events_[marks_.size()].Record(stream).ok()) return;
  marks_.push_back(family);
}

absl::Status OpTimer::Finish(StreamHandle stream, int64_t rows) {
  std::vector<Family> marks = std::move(marks_);
  marks_.clear();
  if (marks.empty()) return absl::OkStatus();
  if (marks.size() == events_.size()) {
    VISMOE_ASSIGN_OR_RETURN(Event e, Event::Create(/*timing=*/true));
    events_.push_back(std::move(e));
  }
  const Event& end = events_[marks.size()];
  VISMOE_RETURN_IF_ERROR(end.Record(stream));
  VISMOE_RETURN_IF_ERROR(end.Synchronize());
  std::array<double, kFamilies> seconds{};
  double total = 0;
  for (size_t i = 0; i < marks.size(); ++i) {
    VISMOE_ASSIGN_OR_RETURN(const float ms, Event::ElapsedMs(events_[i], events_[i + 1]));
    seconds[static_cast<size_t>(marks[i])] += ms * 1e-3;
    total += ms * 1e-3;
  }
  if (sink_ == nullptr) return absl::OkStatus();
  std::vector<DeviceOpTime> ops;
  for (size_t f = 0; f < kFamilies; ++f) {
    if (seconds[f] > 0) ops.push_back({Name(static_cast<Family>(f)), seconds[f]});
  }
  sink_->OnDeviceStep(rows, total, ops);
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
