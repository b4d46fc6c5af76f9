// The MoE half of CudaDecoderStep (cuda_decoder_step.h): the host-driven
// path (Route, Experts through StreamExpertLauncher, the commit and skipping
// rewrites, AddMoeOutput) and the device hit path of pinned layers
// (DeviceMoe, and the deferred routing the host reads a layer or more behind).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backends/cuda/cuda_decoder_step.h"
#include "engine/core/status_macros.h"
#include "engine/offload/expert_batch_runner.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/moe_decode.h"
#include "engine/ops/cuda/moe_permute.h"
#include "engine/ops/cuda/moe_router.h"

namespace vismoe::cuda {

absl::Status CudaDecoderStep::Route(int layer, bool with_scores, RouterResult* r) {
  VISMOE_RETURN_IF_ERROR(Flush());
  Time(OpTimer::Family::kRouter);
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  const int64_t n = n_;
  const int k = c_.num_experts_per_tok, e_count = c_.num_experts;
  VISMOE_RETURN_IF_ERROR(ops_.blas_->Linear(x_, n, h_, w.router, WeightLayout::kOutIn, e_count,
                                            router_logits_, GemmOut::kF32));
  // GPT-OSS's bias is on the logits; DeepSeek-V3's only in the selection.
  if (w.router_bias != nullptr && ops_.router_ == RouterKind::kTopKSoftmaxBiased) {
    VISMOE_RETURN_IF_ERROR(AddBiasF32(router_logits_, n, e_count, w.router_bias, st_));
  }
  switch (ops_.router_) {
    case RouterKind::kDeepseekSoftmax:
    case RouterKind::kDeepseekSigmoid:
      VISMOE_RETURN_IF_ERROR(MoeRouterGroup(router_logits_, n, e_count, GroupRoutingOf(layer),
                                            top_experts_, top_weights_, st_));
      break;
    case RouterKind::kTopKSoftmaxBiased:  // GPT-OSS
      VISMOE_RETURN_IF_ERROR(
          MoeRouterTopKSoftmax(router_logits_, n, e_count, k, top_experts_, top_weights_, st_));
      break;
    case RouterKind::kSparseMixer:  // PhiMoE (top-2, checked by Runs)
      VISMOE_RETURN_IF_ERROR(MoeRouterSparseMixer(
          router_logits_, n, e_count, c_.router_jitter_noise, top_experts_, top_weights_, st_));
      break;
    default:
      VISMOE_RETURN_IF_ERROR(MoeRouterTopK(router_logits_, n, e_count, k, ops_.renormalize_topk_,
                                           top_experts_, top_weights_, st_));
  }
  VISMOE_RETURN_IF_ERROR(BuildMoePermutation(top_experts_, n, k, e_count, counts_, offsets_,
                                             row_token_, slot_row_, st_));
  // The routing goes to the host: the provider and the observers live there.
  std::vector<int32_t> top(static_cast<size_t>(n * k));
  VISMOE_RETURN_IF_ERROR(
      CopyToHostAsync(top.data(), top_experts_, top.size() * sizeof(int32_t), st_));
  r->n = n;
  r->num_experts = e_count;
  r->top_k = k;
  r->weights.clear();
  r->logits.clear();
  if (with_scores) {
    r->weights.resize(top.size());
    r->logits.resize(static_cast<size_t>(n * e_count));
    VISMOE_RETURN_IF_ERROR(
        CopyToHostAsync(r->weights.data(), top_weights_, r->weights.size() * sizeof(float), st_));
    VISMOE_RETURN_IF_ERROR(
        CopyToHostAsync(r->logits.data(), router_logits_, r->logits.size() * sizeof(float), st_));
  }
  VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  ReleaseHeld();  // the last layer's GEMMs are done: before the provider's next call
  r->experts.assign(top.begin(), top.end());
  return absl::OkStatus();
}

GroupRouting CudaDecoderStep::GroupRoutingOf(int layer) const {
  GroupRouting g;
  g.top_k = c_.num_experts_per_tok;
  g.n_group = c_.n_group;
  g.topk_group = c_.topk_group;
  g.group_limited = c_.group_limited;
  g.sigmoid = ops_.router_ == RouterKind::kDeepseekSigmoid;
  g.bias = ops_.layers_[layer].router_bias;
  g.normalize = c_.norm_topk_prob;
  g.scale = c_.routed_scaling_factor;
  return g;
}

absl::Status CudaDecoderStep::Experts(int layer, Phase phase, const RouterResult& r,
                                      ExpertProvider* experts) {
  VISMOE_RETURN_IF_ERROR(Flush());
  Time(OpTimer::Family::kExperts);
  const int e_count = c_.num_experts;
  const int k = c_.num_experts_per_tok;
  // Expert e owns permuted rows [offsets[e], offsets[e + 1]): the prefix sum
  // BuildMoePermutation computes on the device, recomputed here from the same ids.
  std::vector<int32_t> offsets(e_count + 1, 0);
  std::vector<char> used(e_count, 0);  // some slot of the expert is not skipped
  for (size_t i = 0; i < r.experts.size(); ++i) {
    ++offsets[r.experts[i] + 1];  // ids checked by the decoder
    if (r.skipped.empty() || r.skipped[i] == 0) used[r.experts[i]] = 1;
  }
  std::vector<int> active;
  for (int e = 0; e < e_count; ++e) {
    if (used[e]) active.push_back(e);
    offsets[e + 1] += offsets[e];
  }
  if (!r.committed.empty()) VISMOE_RETURN_IF_ERROR(UploadCommittedRouting(r));
  if (!r.skipped.empty()) VISMOE_RETURN_IF_ERROR(ZeroSkippedSlots(r));
  // Only with every id known to be in range: an out-of-range id (a NaN router
  // row) leaves row_token entries unwritten.
  VISMOE_RETURN_IF_ERROR(PermuteRows(x_, static_cast<int>(h_), row_token_, n_ * k, xp_, st_));
  std::vector<int64_t> tokens;  // rows each active expert computes
  for (int e : active) tokens.push_back(offsets[e + 1] - offsets[e]);
  StreamExpertLauncher launcher(*ops_.blas_, ops_.stream_, ops_.expert_done_, layer, offsets, h_,
                                c_.moe_intermediate_size, xp_, gate_up_, act_, yp_);
  launcher.SetHost(ops_.host_pool_, &ops_.host_rows_ready_, &host_experts_);
  // FP8 / MXFP4 experts (as stored, or quantised at load) stay so in their
  // slabs: widened per group.
  if (ops_.widen_experts_) {
    if (widen_ == nullptr) {
      VISMOE_ASSIGN_OR_RETURN(
          widen_, scratch().AllocateArray<Bf16>(
                      CudaDecoderOps::kWidenSlots *
                      StreamExpertLauncher::ExpertScratchElems(h_, c_.moe_intermediate_size)));
    }
    launcher.SetWidenScratch(widen_, CudaDecoderOps::kWidenSlots);
  }
  if (c_.clamped_swiglu.has_value()) {  // GPT-OSS (its spec requires the biases)
    if (layer >= static_cast<int>(ops_.clamped_experts_.size()) ||
        ops_.clamped_experts_[layer].gate_up_bias == nullptr) {
      return absl::InternalError(
          absl::StrCat("layer ", layer, ": the experts' biases are missing"));
    }
    launcher.SetClamped(&ops_.clamped_experts_[layer]);
  }
  VISMOE_RETURN_IF_ERROR(
      RunExpertBatches(*experts, phase, layer, active, tokens, launcher, &held_));
  // Shared experts (DeepSeek) into y first and the weighted sum added to
  // them, rounded as DeviceMoe rounds (after the routed GEMMs: stream order
  // keeps their gate_up_ and act_ from the shared ones).
  const bool shared = ops_.layers_[layer].shared_gate != nullptr;
  if (shared) VISMOE_RETURN_IF_ERROR(SharedExperts(layer, /*accumulate=*/false));
  return UnpermuteCombine(yp_, slot_row_, top_weights_, n_, k, static_cast<int>(h_),
                          /*accumulate=*/shared, y_, st_);
}

absl::Status CudaDecoderStep::UploadCommittedRouting(const RouterResult& r) {
  if (r.weights.size() != r.experts.size()) {
    return absl::InternalError("commit miss policy: the routing has no weights on the host");
  }
  commit_experts_.assign(r.experts.begin(), r.experts.end());
  commit_weights_ = r.weights;
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(top_experts_, commit_experts_.data(),
                                           commit_experts_.size() * sizeof(int32_t), st_));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(top_weights_, commit_weights_.data(),
                                           commit_weights_.size() * sizeof(float), st_));
  return BuildMoePermutation(top_experts_, n_, c_.num_experts_per_tok, c_.num_experts, counts_,
                             offsets_, row_token_, slot_row_, st_);
}

absl::Status CudaDecoderStep::ZeroSkippedSlots(const RouterResult& r) {
  // Skipped slots keep their place in the permutation (rows of an expert that
  // runs for other tokens are computed, rows of an expert no token keeps are
  // never written), so: every permuted row starts at zero and a skipped
  // slot's combine weight is zero -- it adds exactly nothing (paper 001: the
  // kept experts keep their weights, no renormalisation).
  if (r.weights.size() != r.skipped.size()) {
    return absl::InternalError("expert skipping: the routing has no weights on the host");
  }
  skip_weights_ = r.weights;
  for (size_t i = 0; i < skip_weights_.size(); ++i) {
    if (r.skipped[i] != 0) skip_weights_[i] = 0.0f;
  }
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(top_weights_, skip_weights_.data(),
                                           skip_weights_.size() * sizeof(float), st_));
  return MemsetAsync(yp_, 0, static_cast<size_t>(n_) * c_.num_experts_per_tok * h_ * sizeof(Bf16),
                     st_);
}

absl::Status CudaDecoderStep::AddMoeOutput() {
  VISMOE_RETURN_IF_ERROR(Flush());
  Time(OpTimer::Family::kExperts);
  return Add(hs_, y_, n_ * h_, hs_, st_);
}

bool CudaDecoderStep::PrepareDeviceMoe(int layer, ExpertProvider* experts) {
  if (!ops_.device_moe_ || decode_act_ == nullptr || n_ > ops_.staging_.max_rows() ||
      !experts->LayerPinned(layer)) {
    return false;
  }
  absl::StatusOr<const MoeDecodeTable*> table =
      ops_.pinned_tables_.Get(layer, *experts, ops_.stream_);
  return table.ok() && *table != nullptr;
}

absl::Status CudaDecoderStep::DeviceMoe(int layer, Phase /*phase*/, ExpertProvider* experts,
                                        bool observed) {
  return Run(StepOp{StepOp::Kind::kDeviceMoe, layer, 0, experts, observed});
}

absl::Status CudaDecoderStep::DeviceMoeNow(int layer, ExpertProvider* experts, bool observed) {
  VISMOE_ASSIGN_OR_RETURN(const MoeDecodeTable* table,
                          ops_.pinned_tables_.Get(layer, *experts, ops_.stream_));
  if (table == nullptr || decode_act_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeviceMoe(", layer, ") without PrepareDeviceMoe"));
  }
  Time(OpTimer::Family::kRouter);
  const int k = c_.num_experts_per_tok, e_count = c_.num_experts;
  const int inter = c_.moe_intermediate_size;
  const int hidden = static_cast<int>(h_);
  const DeferredStaging::Region stage = ops_.staging_.region(layer);
  const size_t rows_bytes = static_cast<size_t>(n_ * h_) * sizeof(Bf16);
  // The residual as after attention: before the add below changes it.
  if (observed) VISMOE_RETURN_IF_ERROR(CopyToHostAsync(stage.residual, hs_, rows_bytes, st_));
  VISMOE_RETURN_IF_ERROR(ops_.blas_->Linear(x_, n_, h_, ops_.layers_[layer].router,
                                            WeightLayout::kOutIn, e_count, router_logits_,
                                            GemmOut::kF32));
  if (ops_.router_ == RouterKind::kSoftmaxTopK) {
    VISMOE_RETURN_IF_ERROR(MoeDecodeRoute(router_logits_, n_, e_count, k, ops_.renormalize_topk_,
                                          decode_routing_, stage.ids_device, st_));
  } else {  // DeepSeek's: its router kernel, then the permutation of its ids
    VISMOE_RETURN_IF_ERROR(MoeRouterGroup(router_logits_, n_, e_count, GroupRoutingOf(layer),
                                          top_experts_, top_weights_, st_));
    VISMOE_RETURN_IF_ERROR(
        MoeDecodePermute(n_, e_count, k, decode_routing_, stage.ids_device, st_));
  }
  Time(OpTimer::Family::kExperts);
  VISMOE_RETURN_IF_ERROR(MoeDecodeGateUp(x_, n_, hidden, inter, k, e_count, *table, decode_routing_,
                                         decode_act_, st_));
  VISMOE_RETURN_IF_ERROR(MoeDecodeDown(decode_act_, n_, hidden, inter, k, e_count, *table,
                                       decode_routing_, decode_out_, st_));
  // Shared experts (DeepSeek) into y first; the weighted sum adds to them.
  const bool shared = ops_.layers_[layer].shared_gate != nullptr;
  if (shared) VISMOE_RETURN_IF_ERROR(SharedExperts(layer, /*accumulate=*/false));
  VISMOE_RETURN_IF_ERROR(
      MoeDecodeCombine(decode_out_, decode_routing_, n_, k, hidden, y_, hs_, st_, shared));
  if (observed) {
    const size_t slots = static_cast<size_t>(n_) * k;
    VISMOE_RETURN_IF_ERROR(
        CopyToHostAsync(stage.weights, top_weights_, slots * sizeof(float), st_));
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(stage.logits, router_logits_,
                                           static_cast<size_t>(n_) * e_count * sizeof(float), st_));
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(stage.normed, x_, rows_bytes, st_));
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(stage.moe_out, y_, rows_bytes, st_));
  }
  return ops_.staging_.Record(layer, n_, observed, st_, capturing_);
}

absl::StatusOr<bool> CudaDecoderStep::DeferredReady(int layer) {
  if (mode_ != Mode::kDirect) return false;  // its graph has not been launched yet
  return ops_.staging_.Ready(layer);
}

absl::StatusOr<DeferredLayer> CudaDecoderStep::TakeDeferred(int layer) {
  VISMOE_RETURN_IF_ERROR(Flush());
  absl::StatusOr<DeferredLayer> d = ops_.staging_.Take(layer);
  // The layer ran after any held one: its GEMMs are done, and the provider
  // hears of this layer next.
  if (d.ok()) ReleaseHeld();
  return d;
}

}  // namespace vismoe::cuda
