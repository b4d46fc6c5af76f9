// CalibrateCommitThreshold: the commit miss policy's certainty threshold
// (paper 003; engine/core/commit_miss_policy.h) from routing traces of the
// exact path. The threshold is the target_rate quantile of the router
// certainty (KL(softmax || uniform), nats) over every decode token at the MoE
// layers a plan may offload (all but the first `skip_moe_layers`, which Eq.
// 10's lower bound l_semantic always pins): at it, about that share of
// decode (token, layer) pairs is uncertain and may commit. Per-layer shares
// and mean certainties are reported beside it, since one threshold serves
// every layer (the paper's absolute notion of certainty).
//
// Thread safety: a pure function.
#ifndef VISMOE_ENGINE_CALIBRATE_COMMIT_CALIBRATOR_H_
#define VISMOE_ENGINE_CALIBRATE_COMMIT_CALIBRATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/calibrate/routing_trace.h"
#include "engine/policy/calibration_profile.h"

namespace vismoe {

struct CommitCalibrationReport {
  CommitCalibration calibration;
  struct Layer {
    int layer = 0;
    int64_t tokens = 0;     // decode tokens measured at the layer
    int64_t uncertain = 0;  // of those, below the threshold
    double mean_certainty = 0;
  };
  std::vector<Layer> layers;  // the layers measured, ascending
};

// InvalidArgument when target_rate is outside (0, 1) or the traces hold no
// decode certainty at the measured layers (the requests generated at most one
// token each: ask for more new tokens).
// REQUIRES: moe_layers ascending; skip_moe_layers >= 0.
absl::StatusOr<CommitCalibrationReport> CalibrateCommitThreshold(
    const std::vector<std::vector<StepRecord>>& traces, const std::vector<int>& moe_layers,
    int skip_moe_layers, double target_rate);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_COMMIT_CALIBRATOR_H_
