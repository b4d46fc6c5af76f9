// MakeExpertPredictor: builds the expert predictor named by
// OffloadOptions::prefetch ("none" | "history" | "router-lookahead" |
// "mlp-lookahead") for a model, with the calibration profile when one is
// loaded (router-lookahead takes its default vectors, mlp-lookahead needs its
// trained MLP).
// Thread safety: pure function. Ownership: the predictor copies what it needs;
// `checkpoint` and `profile` are only read during the call.
#ifndef VISMOE_ENGINE_POLICY_EXPERT_PREDICTOR_FACTORY_H_
#define VISMOE_ENGINE_POLICY_EXPERT_PREDICTOR_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_predictor.h"
#include "engine/offload/offload_options.h"
#include "engine/policy/calibration_profile.h"

namespace vismoe {

// nullptr for "none". InvalidArgument for an unknown kind (listing the valid
// ones); FailedPrecondition for mlp-lookahead without a profile holding a
// trained MLP; errors of the predictor's Create otherwise.
absl::StatusOr<std::unique_ptr<ExpertPredictor>> MakeExpertPredictor(
    absl::string_view kind, const ModelConfig& config, const Checkpoint& checkpoint,
    const OffloadOptions& options, const CalibrationProfile* profile_or_null);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_EXPERT_PREDICTOR_FACTORY_H_
