#include "engine/policy/expert_predictor_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"
#include "engine/policy/history_expert_predictor.h"
#include "engine/policy/mlp_lookahead_predictor.h"
#include "engine/policy/router_lookahead_predictor.h"

namespace vismoe {

const std::vector<std::string>& ExpertPredictorKinds() {
  static const auto* kinds =
      new std::vector<std::string>{"none", "history", "router-lookahead", "mlp-lookahead"};
  return *kinds;
}

absl::StatusOr<std::unique_ptr<ExpertPredictor>> MakeExpertPredictor(
    absl::string_view kind, const ModelConfig& config, const Checkpoint& checkpoint,
    const OffloadOptions& options, const CalibrationProfile* profile) {
  if (kind == "none") return std::unique_ptr<ExpertPredictor>();
  if (kind == "history") {
    if (options.history_decay <= 0 || options.history_decay > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("history decay must be in (0, 1], got ", options.history_decay));
    }
    return std::unique_ptr<ExpertPredictor>(std::make_unique<HistoryExpertPredictor>(
        config.text.num_hidden_layers, config.text.num_experts, options.history_decay));
  }
  if (kind == "router-lookahead") {
    absl::Span<const float> d;
    if (profile != nullptr) d = profile->default_vectors;
    VISMOE_ASSIGN_OR_RETURN(
        std::unique_ptr<RouterLookaheadPredictor> p,
        RouterLookaheadPredictor::Create(config, checkpoint, options.lookahead_window, d));
    return std::unique_ptr<ExpertPredictor>(std::move(p));
  }
  if (kind == "mlp-lookahead") {
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
  return absl::InvalidArgumentError(
      absl::StrCat("unknown expert predictor \"", std::string(kind),
                   "\"; valid: ", absl::StrJoin(ExpertPredictorKinds(), ", ")));
}

}  // namespace vismoe
