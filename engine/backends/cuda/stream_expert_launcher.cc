#include "engine/backends/cuda/stream_expert_launcher.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cuda/dequantize.h"

namespace vismoe::cuda {

absl::StatusOr<DeviceExpert> ToDeviceExpert(const ExpertWeights& w, int layer, int expert) {
  const TensorView& any = w.down;
  if (any.dtype != DType::kBF16) {
    return absl::UnimplementedError(absl::StrCat("layer ", layer, " expert ", expert, " is ",
                                                 std::string(DTypeName(any.dtype)),
                                                 "; the CUDA backend runs bf16 experts only"));
  }
  DeviceExpert d;
  d.down = static_cast<const Bf16*>(w.down.data);
  if (w.layout == ExpertWeights::Layout::kFusedTransposed) {
    d.layout = WeightLayout::kInOut;
    d.gate_up = static_cast<const Bf16*>(w.gate_up.data);
  } else {
    d.layout = WeightLayout::kOutIn;
    d.gate = static_cast<const Bf16*>(w.gate.data);
    d.up = static_cast<const Bf16*>(w.up.data);
  }
  return d;
}

absl::StatusOr<DeviceExpert> StreamExpertLauncher::DeviceWeights(const AcquiredExpert& a,
                                                                 int slot) {
  const ExpertWeights& w = a.weights;
  if (w.down.dtype == DType::kMxFp4) return WidenMxfp4(a, slot);
  if (w.down.dtype != DType::kF8E4M3) return ToDeviceExpert(w, layer_, a.expert);
  if (widen_ == nullptr || slot >= widen_slots_ || w.layout != ExpertWeights::Layout::kSeparate) {
    return absl::UnimplementedError(
        absl::StrCat("layer ", layer_, " expert ", a.expert,
                     " is F8_E4M3: the CUDA backend widens FP8 experts stored per expert only"));
  }
  Bf16* dst = widen_ + slot * ExpertScratchElems(hidden_, inter_);
  DeviceExpert d;
  d.layout = WeightLayout::kOutIn;
  const TensorView* parts[] = {&w.gate, &w.up, &w.down};
  const Bf16** outs[] = {&d.gate, &d.up, &d.down};
  for (int i = 0; i < 3; ++i) {
    const TensorView& t = *parts[i];
    VISMOE_RETURN_IF_ERROR(DequantizeE4m3(static_cast<const uint8_t*>(t.data), t.dim(0), t.dim(1),
                                          t.scale.data, t.scale.dtype == DType::kBF16, t.scale.rows,
                                          t.scale.cols, dst, stream_.get()));
    *outs[i] = dst;
    dst += t.numel();
  }
  return d;
}

// GPT-OSS's MXFP4 experts (ExpertWeights::kFused): gate_up [2I, H] and down
// [H, I] widened; the first and second halves of gate_up's rows are the
// kOutIn "gate" and "up", so the GEMMs' output columns keep its interleaved
// order, which the clamped SwiGLU reads.
absl::StatusOr<DeviceExpert> StreamExpertLauncher::WidenMxfp4(const AcquiredExpert& a, int slot) {
  const ExpertWeights& w = a.weights;
  if (widen_ == nullptr || slot >= widen_slots_ || w.layout != ExpertWeights::Layout::kFused) {
    return absl::UnimplementedError(absl::StrCat("layer ", layer_, " expert ", a.expert,
                                                 " is MXFP4 in a layout the CUDA backend does not "
                                                 "widen (or no scratch was set)"));
  }
  Bf16* dst = widen_ + slot * ExpertScratchElems(hidden_, inter_);
  for (const TensorView* t : {&w.gate_up, &w.down}) {
    VISMOE_RETURN_IF_ERROR(DequantizeMxfp4(static_cast<const uint8_t*>(t->data), t->dim(0),
                                           t->dim(1), static_cast<const uint8_t*>(t->scale.data),
                                           t == &w.gate_up ? dst : dst + 2 * inter_ * hidden_,
                                           stream_.get()));
  }
  DeviceExpert d;
  d.layout = WeightLayout::kOutIn;
  d.gate = dst;
  d.up = dst + inter_ * hidden_;
  d.down = dst + 2 * inter_ * hidden_;
  return d;
}

absl::Status StreamExpertLauncher::Launch(absl::Span<const AcquiredExpert> batch, int ticket) {
  if (ticket < 0 || ticket >= static_cast<int>(events_.size())) {
    return absl::InternalError(
        absl::StrCat("expert batch ticket ", ticket, " of ", events_.size(), " at layer ", layer_));
  }
  // FP8 experts are widened into the scratch, its slots at a time; one stream
  // orders each group's GEMMs before the next group's widening.
  bool widen = false;
  for (const AcquiredExpert& a : batch) {
    widen =
        widen || a.weights.down.dtype == DType::kF8E4M3 || a.weights.down.dtype == DType::kMxFp4;
  }
  const size_t group =
      widen && widen_ != nullptr ? static_cast<size_t>(widen_slots_) : batch.size();
  std::vector<MoeExpertRows> rows;
  for (size_t begin = 0; begin < batch.size(); begin += group) {
    rows.clear();
    for (size_t i = begin; i < std::min(batch.size(), begin + group); ++i) {
      const AcquiredExpert& a = batch[i];
      VISMOE_ASSIGN_OR_RETURN(DeviceExpert w, DeviceWeights(a, static_cast<int>(i - begin)));
      if (clamped_ != nullptr) {
        w.gate_up_bias = clamped_->gate_up_bias + int64_t{a.expert} * 2 * inter_;
        w.down_bias = clamped_->down_bias + int64_t{a.expert} * hidden_;
      }
      rows.push_back({w, offsets_[a.expert], offsets_[a.expert + 1] - offsets_[a.expert]});
    }
    VISMOE_RETURN_IF_ERROR(blas_.MoeExpertsGrouped(xp_, rows, hidden_, inter_, gate_up_, act_, yp_,
                                                   clamped_ != nullptr ? &clamped_->act : nullptr));
  }
  return events_[ticket].Record(stream_.get());
}

absl::Status StreamExpertLauncher::PrepareHost(absl::Span<const int> experts) {
  if (host_ == nullptr || rows_ready_ == nullptr) {
    return absl::InternalError("CUDA experts: host execution was not set up");
  }
  host_row_.assign(offsets_.size(), -1);
  int64_t rows = 0;
  for (int e : experts) {
    host_row_.at(e) = rows;
    rows += offsets_[e + 1] - offsets_[e];
  }
  host_->x.resize(static_cast<size_t>(rows * hidden_));
  host_->y.resize(static_cast<size_t>(rows * hidden_));
  for (int e : experts) {
    const int64_t m = offsets_[e + 1] - offsets_[e];
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(
        host_->x.data() + host_row_[e] * hidden_, xp_ + int64_t{offsets_[e]} * hidden_,
        static_cast<size_t>(m * hidden_) * sizeof(Bf16), stream_.get()));
  }
  rows_on_host_ = false;
  return rows_ready_->Record(stream_.get());
}

absl::Status StreamExpertLauncher::ComputeOnHost(int expert, const ExpertWeights& weights) {
  if (expert < 0 || expert + 1 >= static_cast<int>(host_row_.size()) || host_row_[expert] < 0) {
    return absl::InternalError(
        absl::StrCat("layer ", layer_, " expert ", expert, " was not prepared for the host"));
  }
  if (!rows_on_host_) {
    VISMOE_RETURN_IF_ERROR(rows_ready_->Synchronize());
    rows_on_host_ = true;
  }
  const int64_t m = offsets_[expert + 1] - offsets_[expert];
  const size_t count = static_cast<size_t>(m * hidden_);
  const size_t at = static_cast<size_t>(host_row_[expert] * hidden_);
  host_->xf.resize(count);
  host_->yf.resize(count);
  ToFloat(DType::kBF16, host_->x.data() + at, count, host_->xf.data());
  std::optional<cpu::ClampedSwigluExpert> oss;
  if (clamped_ != nullptr) {
    oss = cpu::ClampedSwigluExpert{
        TensorView{
            clamped_->host_gate_up_bias + int64_t{expert} * 2 * inter_, DType::kF32, {2 * inter_}},
        TensorView{clamped_->host_down_bias + int64_t{expert} * hidden_, DType::kF32, {hidden_}},
        clamped_->act.alpha, clamped_->act.limit};
  }
  cpu::ExpertForward(pool_, weights, host_->xf.data(), m, hidden_, inter_, host_->yf.data(),
                     oss.has_value() ? &*oss : nullptr);
  for (size_t i = 0; i < count; ++i) host_->y[at + i] = FloatToBf16(host_->yf[i]);
  // Behind the batches already launched, ahead of the weighted sum.
  return CopyToDeviceAsync(yp_ + int64_t{offsets_[expert]} * hidden_, host_->y.data() + at,
                           count * sizeof(Bf16), stream_.get());
}

}  // namespace vismoe::cuda
