// MlpLookaheadPredictor: the "mlp-lookahead" expert predictor at run time
// (VisMMOE 3.3, Eq. 6-8). At every MoE layer l it builds x_l with
// LookaheadFeatures -- this layer's routing histogram (fraction of rows routed
// to each expert), the previous MoE layer's histogram in the same step (zeros
// at the first), the MoE input mean-pooled over the rows, and the request's
// visual summary h_v (zeros for a text-only request on a vision model) --
// exactly as BuildLookaheadExamples does for training, runs the calibrated
// MLP once, and scores every MoE layer of the next `window` (l+1 .. l+W) by
// sigmoid(y): the MLP predicts the union of the window (Eq. 9).
//
// Thread safety: none (see ExpertPredictor). Ownership: owns the MLP.
#ifndef VISMOE_ENGINE_POLICY_MLP_LOOKAHEAD_PREDICTOR_H_
#define VISMOE_ENGINE_POLICY_MLP_LOOKAHEAD_PREDICTOR_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_predictor.h"
#include "engine/policy/mlp_lookahead.h"

namespace vismoe {

class MlpLookaheadPredictor final : public ExpertPredictor {
 public:
  // InvalidArgument when the MLP's input width is not LookaheadFeatureWidth of
  // the model or its output is not num_experts, or window < 1.
  static absl::StatusOr<std::unique_ptr<MlpLookaheadPredictor>> Create(const ModelConfig& config,
                                                                       MlpLookahead mlp,
                                                                       int window);
  MlpLookaheadPredictor(const MlpLookaheadPredictor&) = delete;
  MlpLookaheadPredictor& operator=(const MlpLookaheadPredictor&) = delete;

  const char* name() const override { return "mlp-lookahead"; }
  void BeginRequest() override;
  std::vector<std::pair<int, double>> Predict(int target, int count) override;

  void OnRouting(Phase phase, int layer, const float* hidden,
                 const RouterResult& routing) override;
  // Ignored unless it has hidden_size values.
  void OnVisualSummary(absl::Span<const float> summary) override;

  // The features and raw MLP output of the last observed layer (tests).
  const std::vector<float>& last_features() const { return x_; }
  const std::vector<float>& last_output() const { return y_; }

 private:
  explicit MlpLookaheadPredictor(MlpLookahead mlp) : mlp_(std::move(mlp)) {}

  MlpLookahead mlp_;
  int num_experts_ = 0;
  int hidden_ = 0;
  bool has_vision_ = false;
  int window_ = 0;
  std::vector<int> moe_index_;    // per decoder layer: index among MoE layers, -1
  std::vector<float> visual_;     // h_v: [hidden] for vision models, else empty
  int last_layer_ = -1;           // last observed MoE layer; -1 = none this request
  std::vector<float> histogram_;  // of last_layer_
  std::vector<float> x_, y_;      // features and output at last_layer_
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_MLP_LOOKAHEAD_PREDICTOR_H_
