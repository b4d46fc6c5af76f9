#include "engine/backends/cuda/deferred_staging.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"

namespace vismoe::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void ToF32(const Bf16* src, int64_t count, std::vector<float>* out) {
  out->resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) (*out)[i] = Bf16ToFloat(src[i]);
}

}  // namespace

absl::StatusOr<DeferredStaging> DeferredStaging::Create(const TextConfig& c, int64_t max_rows) {
  DeferredStaging s;
  s.num_experts_ = c.num_experts;
  s.top_k_ = c.num_experts_per_tok;
  s.hidden_ = c.hidden_size;
  s.max_rows_ = max_rows;
  const size_t slots = static_cast<size_t>(max_rows) * s.top_k_;
  const size_t rows = static_cast<size_t>(max_rows) * s.hidden_ * sizeof(Bf16);
  size_t at = Aligned(slots * sizeof(int32_t));
  s.off_weights_ = at;
  at += Aligned(slots * sizeof(float));
  s.off_logits_ = at;
  at += Aligned(static_cast<size_t>(max_rows) * s.num_experts_ * sizeof(float));
  s.off_residual_ = at;
  at += Aligned(rows);
  s.off_normed_ = at;
  at += Aligned(rows);
  s.off_out_ = at;
  at += Aligned(rows);
  s.region_bytes_ = at;
  const int layers = c.num_hidden_layers;
  VISMOE_ASSIGN_OR_RETURN(s.host_, PinnedHostBuffer::Allocate(s.region_bytes_ * layers,
                                                              /*portable=*/true,
                                                              /*mapped=*/true));
  for (int l = 0; l < layers; ++l) {
    VISMOE_ASSIGN_OR_RETURN(Event e, Event::Create());
    s.done_.push_back(std::move(e));
  }
  s.rows_.assign(layers, -1);
  s.observed_.assign(layers, 0);
  return s;
}

DeferredStaging::Region DeferredStaging::region(int layer) const {
  char* base = static_cast<char*>(host_.data()) + region_bytes_ * layer;
  char* dev = static_cast<char*>(host_.device_data()) + region_bytes_ * layer;
  Region r;
  r.ids = reinterpret_cast<int32_t*>(base);
  r.ids_device = reinterpret_cast<int32_t*>(dev);
  r.weights = reinterpret_cast<float*>(base + off_weights_);
  r.logits = reinterpret_cast<float*>(base + off_logits_);
  r.residual = reinterpret_cast<Bf16*>(base + off_residual_);
  r.normed = reinterpret_cast<Bf16*>(base + off_normed_);
  r.moe_out = reinterpret_cast<Bf16*>(base + off_out_);
  return r;
}

absl::Status DeferredStaging::Mark(int layer, int64_t rows, bool observed) {
  if (layer < 0 || layer >= static_cast<int>(rows_.size()) || rows < 1 || rows > max_rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeferredStaging: layer ", layer, ", ", rows, " rows"));
  }
  if (rows_[layer] >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeferredStaging: layer ", layer, " is staged and not taken"));
  }
  rows_[layer] = rows;
  observed_[layer] = observed ? 1 : 0;
  return absl::OkStatus();
}

absl::Status DeferredStaging::Record(int layer, int64_t rows, bool observed, StreamHandle stream,
                                     bool in_graph) {
  VISMOE_RETURN_IF_ERROR(Mark(layer, rows, observed));
  return in_graph ? done_[layer].RecordInGraph(stream) : done_[layer].Record(stream);
}

absl::StatusOr<bool> DeferredStaging::Ready(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(rows_.size()) || rows_[layer] < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeferredStaging: nothing of layer ", layer, " is staged"));
  }
  return done_[layer].Query();
}

absl::StatusOr<DeferredLayer> DeferredStaging::Take(int layer) {
  VISMOE_ASSIGN_OR_RETURN(const bool staged, Ready(layer));
  (void)staged;
  VISMOE_RETURN_IF_ERROR(done_[layer].Synchronize());
  const int64_t rows = std::exchange(rows_[layer], -1);
  const Region r = region(layer);
  DeferredLayer d;
  RouterResult& routing = d.routing;
  routing.n = rows;
  routing.num_experts = num_experts_;
  routing.top_k = top_k_;
  const int64_t slots = rows * top_k_;
  routing.experts.assign(r.ids, r.ids + slots);
  if (!observed_[layer]) return d;
  routing.weights.assign(r.weights, r.weights + slots);
  routing.logits.assign(r.logits, r.logits + rows * num_experts_);
  ToF32(r.residual, rows * hidden_, &residual_);
  ToF32(r.normed, rows * hidden_, &normed_);
  ToF32(r.moe_out, rows * hidden_, &moe_out_);
  d.residual = residual_.data();
  d.normed = normed_.data();
  d.moe_out = moe_out_.data();
  return d;
}

}  // namespace vismoe::cuda
