#include "engine/calibrate/skip_calibrator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

// Every routed slot's combine weight, per decoder layer (the unskipped run).
class WeightRecorder final : public RouterObserver {
 public:
  explicit WeightRecorder(int num_layers) : weights_(static_cast<size_t>(num_layers)) {}
  void OnRouting(Phase, int layer, const float*, const RouterResult& r) override {
    if (layer < 0 || layer >= static_cast<int>(weights_.size())) return;
    weights_[layer].insert(weights_[layer].end(), r.weights.begin(), r.weights.end());
  }
  const std::vector<std::vector<float>>& weights() const { return weights_; }

 private:
  std::vector<std::vector<float>> weights_;
};

absl::Status CheckOptions(const SkipCalibratorOptions& o, size_t num_requests) {
  if (!(o.target_skip_rate > 0 && o.target_skip_rate < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--skip_target_rate must be in (0, 1), got ", o.target_skip_rate));
  }
  if (o.grid < 2)
    return absl::InvalidArgumentError(absl::StrCat("--skip_grid must be >= 2, got ", o.grid));
  if (o.moe_layers.empty() || o.num_layers < 1) {
    return absl::InvalidArgumentError("expert skipping calibration: the model has no MoE layers");
  }
  if (num_requests == 0) {
    return absl::InvalidArgumentError("expert skipping calibration: no requests");
  }
  return absl::OkStatus();
}

// Mean KL of `rule`'s prefills to the exact distributions; adds the counts.
absl::StatusOr<double> MeanKl(const PrefillRunner& run, const ExpertSkipping& rule,
                              const std::vector<std::vector<float>>& exact,
                              ExpertSkipCounts* counts) {
  double sum = 0;
  for (size_t r = 0; r < exact.size(); ++r) {
    VISMOE_ASSIGN_OR_RETURN(PrefillOutcome out, run(r, &rule, nullptr));
    if (out.logits.size() != exact[r].size()) {
      return absl::InternalError(absl::StrCat("calibration request ", r + 1, " returned ",
                                              out.logits.size(), " logits, expected ",
                                              exact[r].size()));
    }
    sum += SoftmaxKl(exact[r], out.logits);
    if (counts != nullptr) counts->Add(out.counts);
  }
  return sum / static_cast<double>(exact.size());
}

// GMLG: alpha(l) for every MoE layer (0 for the others).
absl::StatusOr<std::vector<float>> LayerAlphas(const SkipCalibratorOptions& o,
                                               const PrefillRunner& run,
                                               const std::vector<std::vector<float>>& exact) {
  std::vector<float> alpha(static_cast<size_t>(o.num_layers), 0.0f);
  for (int l : o.moe_layers) {
    ExpertSkipping ablate;
    ablate.alpha.assign(static_cast<size_t>(o.num_layers), 1.0f);
    ablate.alpha[l] = 0.0f;
    ablate.tau_text = ablate.tau_visual = std::numeric_limits<float>::denorm_min();
    VISMOE_ASSIGN_OR_RETURN(double kl, MeanKl(run, ablate, exact, nullptr));
    alpha[l] = static_cast<float>(kl);
  }
  return alpha;
}

// tau[0] = 0, tau[i] = the i/D quantile of the GMLG scores.
std::vector<float> ThresholdGrid(const std::vector<std::vector<float>>& weights,
                                 const std::vector<float>& alpha, int d) {
  std::vector<float> scores;
  for (size_t l = 0; l < weights.size(); ++l) {
    for (float w : weights[l]) scores.push_back(alpha[l] * w);
  }
  std::sort(scores.begin(), scores.end());
  std::vector<float> grid(static_cast<size_t>(d), 0.0f);
  if (scores.empty()) return grid;
  for (int i = 1; i < d; ++i) {
    // The smallest score with a share i/D of the scores below or equal to it,
    // nudged up so that share is skipped (the rule skips s < tau).
    const size_t at = std::min(scores.size() - 1, scores.size() * i / d);
    grid[i] = std::nextafter(scores[at], std::numeric_limits<float>::infinity());
  }
  return grid;
}

}  // namespace

double SoftmaxKl(absl::Span<const float> p_logits, absl::Span<const float> q_logits) {
  auto log_softmax = [](absl::Span<const float> x) {
    const double mx = *std::max_element(x.begin(), x.end());
    double z = 0;
    for (float v : x) z += std::exp(static_cast<double>(v) - mx);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - mx - std::log(z);
    return out;
  };
  const std::vector<double> lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);  // rounding may leave a tiny negative
}

absl::StatusOr<SkipCalibrationReport> CalibrateExpertSkipping(const SkipCalibratorOptions& o,
                                                              size_t num_requests,
                                                              const PrefillRunner& run) {
  VISMOE_RETURN_IF_ERROR(CheckOptions(o, num_requests));
  // 1. The exact prefills and their routing weights.
  std::vector<std::vector<float>> exact;
  WeightRecorder weights(o.num_layers);
  for (size_t r = 0; r < num_requests; ++r) {
    VISMOE_ASSIGN_OR_RETURN(PrefillOutcome out, run(r, nullptr, &weights));
    exact.push_back(std::move(out.logits));
  }
  SkipCalibrationReport report;
  SkipCalibration& cal = report.calibration;
  // 2. GMLG, 3. the grid.
  VISMOE_ASSIGN_OR_RETURN(cal.alpha, LayerAlphas(o, run, exact));
  report.grid = ThresholdGrid(weights.weights(), cal.alpha, o.grid);
  // 4. The frontier search.
  std::map<std::pair<int, int>, ExpertSkipCounts> counts;
  auto evaluate = [&](int i, int j) -> absl::StatusOr<FrontierPoint> {
    const ExpertSkipping rule{cal.alpha, report.grid[i], report.grid[j]};
    ExpertSkipCounts c;
    FrontierPoint p;
    VISMOE_ASSIGN_OR_RETURN(p.kl, MeanKl(run, rule, exact, &c));
    p.skip_rate = c.total_routed() == 0 ? 0.0
                                        : static_cast<double>(c.total_skipped()) /
                                              static_cast<double>(c.total_routed());
    counts[{i, j}] = c;
    return p;
  };
  VISMOE_ASSIGN_OR_RETURN(report.search,
                          FrontierSearch(o.grid, o.grid, o.target_skip_rate, evaluate));
  const FrontierPoint& best = report.search.best;
  cal.tau_text = report.grid[best.i];
  cal.tau_visual = report.grid[best.j];
  cal.target_skip_rate = o.target_skip_rate;
  cal.skip_rate = best.skip_rate;
  cal.kl = best.kl;
  const ExpertSkipCounts& c = counts[{best.i, best.j}];
  auto share = [](uint64_t a, uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / b; };
  report.text_skip_rate = share(c.skipped[0], c.routed[0]);
  report.visual_skip_rate = share(c.skipped[1], c.routed[1]);
  return report;
}

}  // namespace vismoe
