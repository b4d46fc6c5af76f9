// PredictorEvaluator: measures an expert predictor's Hot Recall@B on a live
// forward pass (VisMMOE 3.3). It wraps the predictor as a RouterObserver,
// forwards every hook to it, and after each MoE layer routes asks it for the
// top-B experts of the next MoE layer; when that layer routes, the share of
// its activated (distinct) experts among the B is tallied per phase and per
// layer. The last MoE layer of a step predicts nothing (no next layer).
// Thread safety: none; driven by the one forward thread. Owns the predictor.
#ifndef VISMOE_ENGINE_CALIBRATE_PREDICTOR_EVALUATOR_H_
#define VISMOE_ENGINE_CALIBRATE_PREDICTOR_EVALUATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "engine/core/routing.h"
#include "engine/offload/expert_predictor.h"

namespace vismoe {

// Hot Recall@B of one predictor: hits / needed per phase.
struct RecallTally {
  int64_t hits[2] = {0, 0};        // [Phase::kPrefill, Phase::kDecode]
  int64_t needed[2] = {0, 0};      // activated experts of the predicted layers
  double Recall(int phase) const;  // 0..1; 0 when nothing was needed
  double Overall() const;
};

// Paper 003's Figure 2 on one predictor: decode tokens bucketed by how many
// of their router's top-k experts the predictor's top-k for the layer held
// (Eq. 3's numerator, 0..k), with the sum of their router certainty
// (KL(softmax || uniform), nats).
struct CertaintyTally {
  std::vector<int64_t> tokens;              // [k + 1]
  std::vector<double> certainty_sum;        // [k + 1]
  double MeanCertainty(int correct) const;  // 0 for an empty bucket
};

class PredictorEvaluator final : public RouterObserver {
 public:
  // `moe_layers`: the decoder layers with routed experts, ascending.
  // REQUIRES: predictor != nullptr, b >= 1, every MoE layer < num_layers.
  PredictorEvaluator(std::unique_ptr<ExpertPredictor> predictor, std::vector<int> moe_layers, int b,
                     int num_layers);
  PredictorEvaluator(const PredictorEvaluator&) = delete;
  PredictorEvaluator& operator=(const PredictorEvaluator&) = delete;

  // A new request: the predictor's BeginRequest, and no carried prediction.
  void BeginRequest();

  void OnRouting(Phase phase, int layer, const float* hidden,
                 const RouterResult& routing) override;
  void OnPostAttention(Phase phase, int layer, const float* residual, int64_t n) override;
  void OnMoeOutput(Phase phase, int layer, const float* out, int64_t n) override;
  void OnVisualSummary(absl::Span<const float> summary) override;

  const RecallTally& tally() const { return tally_; }
  // Indexed by the predicted decoder layer.
  const std::vector<RecallTally>& per_layer() const { return per_layer_; }
  // Decode tokens of the predicted layers (empty until one was scored).
  const CertaintyTally& certainty() const { return certainty_; }

 private:
  void Score(Phase phase, int layer, const RouterResult& r);
  void ScoreCertainty(const RouterResult& r);

  std::unique_ptr<ExpertPredictor> predictor_;
  std::vector<int> moe_layers_;
  int b_;
  int pending_layer_ = -1;  // the layer `pending_` predicts; -1 = none
  int last_layer_ = -1;
  std::vector<int> pending_;
  RecallTally tally_;
  std::vector<RecallTally> per_layer_;
  CertaintyTally certainty_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_PREDICTOR_EVALUATOR_H_
