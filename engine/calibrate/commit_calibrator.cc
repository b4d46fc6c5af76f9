#include "engine/calibrate/commit_calibrator.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

// Decode certainties per measured layer, in trace order.
std::map<int, std::vector<float>> DecodeCertainties(
    const std::vector<std::vector<StepRecord>>& traces, const std::vector<int>& measured) {
  std::map<int, std::vector<float>> by_layer;
  for (const auto& trace : traces) {
    for (const StepRecord& step : trace) {
      if (step.phase != Phase::kDecode) continue;
      for (const LayerRecord& l : step.layers) {
        if (std::find(measured.begin(), measured.end(), l.layer) == measured.end()) continue;
        std::vector<float>& v = by_layer[l.layer];
        v.insert(v.end(), l.certainty.begin(), l.certainty.end());
      }
    }
  }
  return by_layer;
}

}  // namespace

absl::StatusOr<CommitCalibrationReport> CalibrateCommitThreshold(
    const std::vector<std::vector<StepRecord>>& traces, const std::vector<int>& moe_layers,
    int skip_moe_layers, double target_rate) {
  if (!(target_rate > 0 && target_rate < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--commit_target_rate must be in (0, 1), got ", target_rate));
  }
  const std::vector<int> measured(
      moe_layers.begin() +
          std::min<size_t>(static_cast<size_t>(skip_moe_layers), moe_layers.size()),
      moe_layers.end());
  const std::map<int, std::vector<float>> by_layer = DecodeCertainties(traces, measured);
  std::vector<float> all;
  for (const auto& [layer, v] : by_layer) all.insert(all.end(), v.begin(), v.end());
  if (all.empty()) {
    return absl::InvalidArgumentError(
        "commit calibration: no decode token was routed at a MoE layer a plan may offload (the "
        "requests must generate at least two tokens, and the model needs more MoE layers than "
        "--l_semantic)");
  }
  std::sort(all.begin(), all.end());
  CommitCalibrationReport report;
  CommitCalibration& c = report.calibration;
  // Strictly below the value at the quantile's index: ~target_rate of them.
  c.threshold = all[static_cast<size_t>(target_rate * static_cast<double>(all.size()))];
  c.target_rate = target_rate;
  c.tokens = static_cast<int64_t>(all.size());
  const int64_t below = std::lower_bound(all.begin(), all.end(), c.threshold) - all.begin();
  c.uncertain_rate = static_cast<double>(below) / static_cast<double>(all.size());
  for (const auto& [layer, v] : by_layer) {
    CommitCalibrationReport::Layer row;
    row.layer = layer;
    row.tokens = static_cast<int64_t>(v.size());
    double sum = 0;
    for (float x : v) {
      sum += x;
      row.uncertain += x < c.threshold ? 1 : 0;
    }
    row.mean_certainty = v.empty() ? 0.0 : sum / static_cast<double>(v.size());
    report.layers.push_back(row);
  }
  return report;
}

}  // namespace vismoe
