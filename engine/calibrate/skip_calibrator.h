// CalibrateExpertSkipping: what vismoe-calibrate learns for MoDES expert
// skipping (paper 001) on its calibration requests, through a PrefillRunner
// (the engine in vismoe-calibrate; a synthetic model in tests):
//  1. The unskipped prefill of every request: its next-token distribution
//     prob_j (softmax of the last row's logits) and every routed slot's
//     combine weight per layer.
//  2. GMLG: alpha(l) = (1/N) sum_j KL(prob_j || prob_j^(l)), prob^(l) with
//     every expert of MoE layer l skipped. The engine's own rule does the
//     ablation: alpha = 0 at layer l (score 0 < tau) and 1 elsewhere with tau
//     the smallest positive float, so other layers skip only slots of weight
//     exactly 0, which add nothing anyway -- they stay bit-identical.
//  3. The threshold grid: tau[0] = 0 and tau[i] the i/D quantile of all
//     routed slots' GMLG scores alpha(l) * weight, the same grid for text and
//     visual thresholds (the runner's routing does not say which rows are
//     visual; the two thresholds still move independently on it).
//  4. FrontierSearch (frontier_search.h) for the target skip rate rho: f is the
//     share of routed (token, expert) slots skipped over all prefill tokens,
//     g the mean KL to step 1's distributions, both measured by running the
//     requests with the candidate rule.
// Thread safety: a free function; the runner is called from this thread.
#ifndef VISMOE_ENGINE_CALIBRATE_SKIP_CALIBRATOR_H_
#define VISMOE_ENGINE_CALIBRATE_SKIP_CALIBRATOR_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/calibrate/frontier_search.h"
#include "engine/core/expert_skipping.h"
#include "engine/core/routing.h"
#include "engine/policy/calibration_profile.h"

namespace vismoe {

// One request's prefill as calibration needs it.
struct PrefillOutcome {
  std::vector<float> logits;  // [vocab]: the last prompt row's
  ExpertSkipCounts counts;    // what `rule` skipped (zero when rule is null)
};

// Runs calibration request `request` (0-based) through prefill with expert
// skipping `rule` (null = exact) and `observer` watching the routing (may be
// null).
using PrefillRunner = std::function<absl::StatusOr<PrefillOutcome>(
    size_t request, const ExpertSkipping* rule, RouterObserver* observer)>;

struct SkipCalibratorOptions {
  double target_skip_rate = 0.5;  // rho, in (0, 1)
  int grid = 12;                  // D: candidate thresholds per modality, >= 2
  int num_layers = 0;             // decoder layers (alpha's length)
  std::vector<int> moe_layers;    // decoder layers with routed experts
};

struct SkipCalibrationReport {
  SkipCalibration calibration;  // what the profile stores
  std::vector<float> grid;      // the candidate thresholds (both modalities)
  FrontierSearchResult search;
  double text_skip_rate = 0, visual_skip_rate = 0;  // at the chosen thresholds
};

// KL(p || q) of the softmax distributions of two logit rows (nats).
double SoftmaxKl(absl::Span<const float> p_logits, absl::Span<const float> q_logits);

// Steps 1-4 over requests [0, num_requests). InvalidArgument for bad options
// (naming --skip_target_rate / --skip_grid) or no requests; the runner's and
// the search's errors otherwise.
absl::StatusOr<SkipCalibrationReport> CalibrateExpertSkipping(const SkipCalibratorOptions& options,
                                                              size_t num_requests,
                                                              const PrefillRunner& run);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_SKIP_CALIBRATOR_H_
