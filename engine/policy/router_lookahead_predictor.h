// RouterLookaheadPredictor: the parameter-free "router-lookahead" expert
// predictor (paper 004, section 3.2). At MoE layer l it forms the
// quasi-hidden state q = RMSNorm_{l'}(r_l + d_l) -- r_l the residual stream
// after l's attention, d_l the layer's default vector (mean MoE output from
// the calibration profile; zero without one), RMSNorm_{l'} the
// post-attention norm of the target layer l' -- and applies l''s router:
// p = softmax(W_router(l') q). Over a step's rows (at most kMaxRows, evenly
// subsampled) the top-k-masked probabilities are averaged; an expert's score
// is that average. The families whose selection is not the softmax's top-k
// (DeepSeek's group limits and biased sigmoid, GPT-OSS's router bias) run
// their own router instead and average its routing weights, so the picks are
// the family's. Targets are the MoE layers at most `window` MoE layers
// after the last observed one (the observed layer itself included: with d = 0
// it reproduces that layer's routing exactly).
//
// Thread safety: none (see ExpertPredictor). Ownership: copies the router
// and norm weights (as fp32) out of the checkpoint at Create.
#ifndef VISMOE_ENGINE_POLICY_ROUTER_LOOKAHEAD_PREDICTOR_H_
#define VISMOE_ENGINE_POLICY_ROUTER_LOOKAHEAD_PREDICTOR_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_predictor.h"

namespace vismoe {

class RouterLookaheadPredictor final : public ExpertPredictor {
 public:
  static constexpr int kMaxRows = 64;

  // Reads "<text prefix>layers.N.mlp.gate.weight" [E, H] and
  // "layers.N.post_attention_layernorm.weight" [H] of every MoE layer (any
  // dtype). `default_vectors` is empty or [num_layers * hidden_size].
  // InvalidArgument naming the tensor or the bad size; window must be >= 0.
  static absl::StatusOr<std::unique_ptr<RouterLookaheadPredictor>> Create(
      const ModelConfig& config, const Checkpoint& checkpoint, int window,
      absl::Span<const float> default_vectors);
  RouterLookaheadPredictor(const RouterLookaheadPredictor&) = delete;
  RouterLookaheadPredictor& operator=(const RouterLookaheadPredictor&) = delete;

  const char* name() const override { return "router-lookahead"; }
  void BeginRequest() override;
  std::vector<std::pair<int, double>> Predict(int target, int count) override;

  void OnPostAttention(Phase phase, int layer, const float* residual, int64_t n) override;
  void OnRouting(Phase /*phase*/, int /*layer*/, const float* /*hidden*/,
                 const RouterResult& /*routing*/) override {}

 private:
  RouterLookaheadPredictor() = default;
  // Average top-k-masked router probabilities of `target` over rows_.
  std::vector<double> Scores(int target) const;
  // The family router's (cpu::FamilyRoute) mean routing weight per expert
  // over the normed rows q [num_rows_, H] (DeepSeek's and GPT-OSS's routers).
  std::vector<double> FamilyScores(int target, const float* q, const TensorView& router) const;

  int num_experts_ = 0;
  int top_k_ = 0;
  int hidden_ = 0;
  float eps_ = 0;
  int window_ = 0;
  std::vector<int> moe_index_;                   // per decoder layer: index among MoE layers, -1
  std::vector<std::vector<float>> router_;       // per decoder layer: [E, H] (empty if dense)
  std::vector<std::vector<float>> norm_;         // per decoder layer: [H] (empty if dense)
  std::vector<std::vector<float>> norm_bias_;    // per decoder layer: [H], LayerNorm families
  bool layer_norm_ = false;                      // NormKind::kLayerNorm (PhiMoE)
  ArchSpec spec_;                                // its router kind (FamilyScores)
  TextConfig text_;                              // the routers' fields (FamilyScores)
  std::vector<std::vector<float>> router_bias_;  // per decoder layer: [E] (kRouterBias)
  std::vector<float> default_vectors_;           // [num_layers * H] or empty
  int last_layer_ = -1;                          // last observed MoE layer; -1 = none this request
  std::vector<float> rows_;                      // [m, H]: r_l + d_l of the subsampled rows
  int64_t num_rows_ = 0;
  std::vector<std::vector<double>> cache_;  // per decoder layer: scores from rows_, or empty
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_ROUTER_LOOKAHEAD_PREDICTOR_H_
