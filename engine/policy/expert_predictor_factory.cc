#include "engine/policy/expert_predictor_factory.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "engine/policy/history_expert_predictor.h"
#include "engine/policy/mlp_lookahead_predictor.h"
#include "engine/policy/router_lookahead_predictor.h"

namespace vismoe {
namespace {

absl::StatusOr<std::unique_ptr<ExpertPredictor>> MakeHistory(const ModelConfig& config,
                                                             const OffloadOptions& options) {
  if (options.history_decay <= 0 || options.history_decay > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("history decay must be in (0, 1], got ", options.history_decay));
  }
  return std::unique_ptr<ExpertPredictor>(std::make_unique<HistoryExpertPredictor>(
      config.text.num_hidden_layers, config.text.num_experts, options.history_decay));
}

absl::StatusOr<std::unique_ptr<ExpertPredictor>> MakeRouterLookahead(
    const ModelConfig& config, const Checkpoint& checkpoint, const OffloadOptions& options,
    const CalibrationProfile* profile) {
  absl::Span<const float> d;
  if (profile != nullptr) d = profile->default_vectors;
  VISMOE_ASSIGN_OR_RETURN(
      std::unique_ptr<RouterLookaheadPredictor> p,
      RouterLookaheadPredictor::Create(config, checkpoint, options.lookahead_window, d));
  return std::unique_ptr<ExpertPredictor>(std::move(p));
}

absl::StatusOr<std::unique_ptr<ExpertPredictor>> MakeMlpLookahead(
    const ModelConfig& config, const OffloadOptions& options, const CalibrationProfile* profile) {
  if (profile == nullptr || !profile->mlp.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "expert predictor mlp-lookahead needs a trained predictor: ",
        profile == nullptr ? "no calibration profile is loaded"
                           : "the calibration profile has no trained MLP (too few samples?)",
        "; run vismoe-calibrate on this model and pass its profile with "
        "--calibration_profile"));
  }
  VISMOE_ASSIGN_OR_RETURN(
      std::unique_ptr<MlpLookaheadPredictor> p,
      MlpLookaheadPredictor::Create(config, *profile->mlp, options.lookahead_window));
  return std::unique_ptr<ExpertPredictor>(std::move(p));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertPredictor>> MakeExpertPredictor(
    absl::string_view kind, const ModelConfig& config, const Checkpoint& checkpoint,
    const OffloadOptions& options, const CalibrationProfile* profile) {
  const std::optional<PredictorKind> k = PolicyFromName<PredictorKind>(kind);
  if (!k.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown expert predictor \"", std::string(kind),
                     "\"; valid: ", PolicyNames<PredictorKind>(", ")));
  }
  switch (*k) {
    case PredictorKind::kNone:
      return std::unique_ptr<ExpertPredictor>();
    case PredictorKind::kHistory:
      return MakeHistory(config, options);
    case PredictorKind::kRouterLookahead:
      return MakeRouterLookahead(config, checkpoint, options, profile);
    case PredictorKind::kMlpLookahead:
      return MakeMlpLookahead(config, options, profile);
  }
  return absl::InternalError("unhandled expert predictor kind");
}

}  // namespace vismoe
