// LocalEngine's per-request checks and policy overrides: a request's own
// fields, and its compression, skipping and miss policy resolved against the
// engine's (engine/runtime/local_engine.h).
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/local_engine.h"
#include "engine/runtime/sampler.h"

namespace vismoe {
namespace {

// Whether misses are computed on the host ("cpu") is the offload provider's,
// one for every sequence of a step: a request may turn commit on or off, not
// change that.
absl::Status CheckRequestMissPolicy(const std::string& asked, const std::string& engine) {
  const bool host = engine == PolicyName(MissPolicy::kCpu);
  if (asked == PolicyName(MissPolicy::kCpu) && !host) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.miss_policy \"cpu\" is an engine-wide setting (host execution of misses is "
        "shared by every request of a step); this engine's miss policy is \"",
        engine, "\""));
  }
  if (asked == PolicyName(MissPolicy::kFetch) && host) {
    return absl::InvalidArgumentError(
        "policy.miss_policy \"fetch\": this engine computes misses on the host for every "
        "request (miss policy \"cpu\"); a request may ask for \"cpu\" or \"commit\"");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LocalEngine::CheckRequest(const GenerateRequest& request) {
  if (request.messages.empty()) return absl::InvalidArgumentError("request has no messages");
  const SamplingParams& s = request.sampling;
  if (s.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.max_new_tokens must be >= 1, got ", s.max_new_tokens));
  }
  VISMOE_RETURN_IF_ERROR(Sampler::Validate(s));
  for (const std::string& stop : s.stop) {
    if (stop.empty()) return absl::InvalidArgumentError("sampling.stop has an empty string");
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenCompressorOptions> LocalEngine::RequestCompression(
    const GenerateRequest& request) const {
  TokenCompressorOptions co = options_.compression;
  if (request.policy.token_compressor.has_value()) co.kind = *request.policy.token_compressor;
  if (request.policy.keep_ratio.has_value()) co = WithKeepRatio(co, *request.policy.keep_ratio);
  // Checked here, so a request that cannot compress fails alone, before it
  // joins a batch.
  VISMOE_RETURN_IF_ERROR(CheckCompressionRouting(co, "policy.token_compressor"));
  // The predictor feeds the shared slab cache, so it is chosen per engine,
  // not per request: a request may only name the one that is running.
  if (request.policy.expert_predictor.has_value() &&
      *request.policy.expert_predictor != options_.offload.prefetch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.expert_predictor \"", *request.policy.expert_predictor,
        "\" cannot be chosen per request; this server runs \"", options_.offload.prefetch, "\""));
  }
  return co;
}

absl::StatusOr<std::optional<ExpertSkipping>> LocalEngine::RequestSkipping(
    const GenerateRequest& request) const {
  ExpertSkippingOptions so = options_.skipping;
  const PolicyOverrides& po = request.policy;
  if (po.expert_skipping.has_value()) so.kind = *po.expert_skipping;
  // A request's threshold is a value, never "unset": negative is an error.
  for (const auto& [name, value] : {std::pair{"policy.skip_tau_text", po.skip_tau_text},
                                    std::pair{"policy.skip_tau_visual", po.skip_tau_visual}}) {
    if (value.has_value() && !(*value >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be a finite value >= 0, got ", *value));
    }
  }
  if (po.skip_tau_text.has_value()) so.tau_text = *po.skip_tau_text;
  if (po.skip_tau_visual.has_value()) so.tau_visual = *po.skip_tau_visual;
  const SkipOptionNames names{"policy.expert_skipping", "policy.skip_tau_text",
                              "policy.skip_tau_visual"};
  return ResolveExpertSkipping(so, skip_calibration_ ? &*skip_calibration_ : nullptr,
                               config_.text.num_hidden_layers, names);
}

absl::StatusOr<std::optional<CommitMissPolicy>> LocalEngine::RequestCommit(
    const GenerateRequest& request) const {
  std::string miss_policy = options_.offload.miss_policy;
  CommitMissOptions co = options_.commit;
  const PolicyOverrides& po = request.policy;
  if (po.miss_policy.has_value()) {
    VISMOE_RETURN_IF_ERROR(CheckRequestMissPolicy(*po.miss_policy, miss_policy));
    miss_policy = *po.miss_policy;
  }
  // A request's values are values, never "unset": each is checked as given.
  if (po.commit_threshold.has_value()) {
    if (!(*po.commit_threshold >= 0) || !std::isfinite(*po.commit_threshold)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy.commit_threshold must be a finite value >= 0, got ", *po.commit_threshold));
    }
    co.threshold = *po.commit_threshold;
  }
  if (po.commit_owa_alpha1.has_value()) co.owa_alpha1 = *po.commit_owa_alpha1;
  if (po.commit_owa_alpha2.has_value()) co.owa_alpha2 = *po.commit_owa_alpha2;
  const CommitOptionNames names{"policy.miss_policy", "policy.commit_threshold",
                                "policy.commit_owa_alpha1", "policy.commit_owa_alpha2"};
  VISMOE_ASSIGN_OR_RETURN(
      std::optional<CommitMissPolicy> rule,
      ResolveCommitMiss(miss_policy, co, commit_calibration_ ? &*commit_calibration_ : nullptr,
                        config_.text.num_experts_per_tok, names));
  VISMOE_RETURN_IF_ERROR(CheckCommitHasPredictor(rule, names.miss_policy));
  return rule;
}

absl::Status LocalEngine::CheckCommitHasPredictor(const std::optional<CommitMissPolicy>& rule,
                                                  const std::string& name) const {
  if (!rule.has_value() || offload_ == nullptr || offload_->plan().offloaded_layer_ids.empty() ||
      predictor_ != nullptr) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      name,
      " \"commit\" computes with the experts the predictor chose, and this engine runs no "
      "expert predictor (expert_predictor \"none\"): choose history, router-lookahead or "
      "mlp-lookahead"));
}

}  // namespace vismoe
