// PredictorEvaluator on hand-made routing: it asks for the next MoE layer
// after each routing, scores that prediction against the next layer's distinct
// experts (per phase and per layer), forwards every hook, and carries nothing
// across steps or requests.
#include "engine/calibrate/predictor_evaluator.h"

#include <memory>
#include <utility>
#include <vector>

#include "engine/core/commit_miss_policy.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

// Always predicts experts {0, 1, 2} (in that order) and counts the hooks.
class FixedPredictor final : public ExpertPredictor {
 public:
  struct Counts {
    int begin = 0, routing = 0, post_attention = 0, moe_output = 0, summary = 0;
    std::vector<int> targets;  // Predict()'s targets in order
  };
  explicit FixedPredictor(Counts* c) : c_(c) {}
  const char* name() const override { return "fixed"; }
  void BeginRequest() override { ++c_->begin; }
  std::vector<std::pair<int, double>> Predict(int target, int count) override {
    c_->targets.push_back(target);
    std::vector<std::pair<int, double>> out = {{0, 3.0}, {1, 2.0}, {2, 1.0}};
    out.resize(std::min<size_t>(out.size(), count));
    return out;
  }
  void OnRouting(Phase, int, const float*, const RouterResult&) override { ++c_->routing; }
  void OnPostAttention(Phase, int, const float*, int64_t) override { ++c_->post_attention; }
  void OnMoeOutput(Phase, int, const float*, int64_t) override { ++c_->moe_output; }
  void OnVisualSummary(absl::Span<const float>) override { ++c_->summary; }

 private:
  Counts* c_;
};

// One token routed to `experts` (top_k = experts.size()) among 8.
RouterResult Routed(std::vector<int> experts) {
  RouterResult r;
  r.n = 1;
  r.num_experts = 8;
  r.top_k = static_cast<int>(experts.size());
  r.experts = std::move(experts);
  return r;
}

TEST(PredictorEvaluatorTest, ScoresNextLayerPredictions) {
  FixedPredictor::Counts c;
  // MoE layers 1, 2, 3 of 4 (layer 0 dense); B = 2 -> predicted {0, 1}.
  PredictorEvaluator ev(std::make_unique<FixedPredictor>(&c), {1, 2, 3}, 2, 4);
  ev.BeginRequest();
  const float h[1] = {0};
  // Prefill step: layer 1 -> predicts layer 2; layer 2 routes {0, 5}: 1 of 2.
  ev.OnRouting(Phase::kPrefill, 1, h, Routed({3, 4}));
  ev.OnRouting(Phase::kPrefill, 2, h, Routed({0, 5}));
  // layer 3 routes {0, 1, 1}: distinct {0, 1}, both predicted: 2 of 2.
  ev.OnRouting(Phase::kPrefill, 3, h, Routed({0, 1, 1}));
  // Decode step: layer 1 is not scored (nothing carried across steps).
  ev.OnRouting(Phase::kDecode, 1, h, Routed({0, 1}));
  ev.OnRouting(Phase::kDecode, 2, h, Routed({6, 7}));    // 0 of 2
  EXPECT_EQ(c.targets, (std::vector<int>{2, 3, 2, 3}));  // never beyond the last MoE layer
  EXPECT_EQ(ev.tally().hits[0], 3);
  EXPECT_EQ(ev.tally().needed[0], 4);
  EXPECT_EQ(ev.tally().hits[1], 0);
  EXPECT_EQ(ev.tally().needed[1], 2);
  EXPECT_DOUBLE_EQ(ev.tally().Recall(0), 0.75);
  EXPECT_DOUBLE_EQ(ev.tally().Recall(1), 0.0);
  EXPECT_DOUBLE_EQ(ev.tally().Overall(), 0.5);
  EXPECT_EQ(ev.per_layer()[2].hits[0], 1);
  EXPECT_EQ(ev.per_layer()[2].needed[1], 2);
  EXPECT_EQ(ev.per_layer()[3].hits[0], 2);
  EXPECT_EQ(ev.per_layer()[1].needed[0] + ev.per_layer()[1].needed[1], 0);

  // A new request drops the pending prediction for layer 3.
  ev.BeginRequest();
  ev.OnRouting(Phase::kPrefill, 3, h, Routed({0, 1}));
  EXPECT_EQ(ev.tally().needed[0], 4);
  EXPECT_EQ(c.begin, 2);
  EXPECT_EQ(c.routing, 6);

  // Other hooks reach the predictor.
  const std::vector<float> summary = {1, 2};
  ev.OnPostAttention(Phase::kDecode, 1, h, 1);
  ev.OnMoeOutput(Phase::kDecode, 1, h, 1);
  ev.OnVisualSummary(summary);
  EXPECT_EQ(c.post_attention, 1);
  EXPECT_EQ(c.moe_output, 1);
  EXPECT_EQ(c.summary, 1);
}

// Paper 003's Figure 2: decode tokens of the predicted layers, bucketed by how
// many of their top-k the predictor's top-k held, with their certainty.
TEST(PredictorEvaluatorTest, TalliesDecodeCertaintyByCorrectPredictions) {
  FixedPredictor::Counts c;
  // B = 3 -> predicted {0, 1, 2}; top-2 routing: the first 2 ({0, 1}) count.
  PredictorEvaluator ev(std::make_unique<FixedPredictor>(&c), {1, 2}, 3, 3);
  const float h[1] = {0};
  auto with_logits = [](std::vector<int> experts, std::vector<float> logits) {
    RouterResult r = Routed(std::move(experts));
    r.logits = std::move(logits);
    return r;
  };
  const std::vector<float> flat(8, 0.0f);  // certainty 0
  std::vector<float> peaked(8, 0.0f);
  peaked[2] = 3.0f;
  ev.OnRouting(Phase::kPrefill, 1, h, with_logits({0, 1}, flat));
  ev.OnRouting(Phase::kPrefill, 2, h, with_logits({0, 1}, flat));  // prefill: not tallied
  EXPECT_TRUE(ev.certainty().tokens.empty());
  ev.OnRouting(Phase::kDecode, 1, h, with_logits({0, 1}, flat));
  ev.OnRouting(Phase::kDecode, 2, h, with_logits({2, 1}, peaked));  // 1 of {0, 1}
  ev.OnRouting(Phase::kDecode, 1, h, with_logits({0, 1}, flat));
  ev.OnRouting(Phase::kDecode, 2, h, with_logits({0, 1}, flat));  // 2 correct
  ASSERT_EQ(ev.certainty().tokens.size(), 3u);
  EXPECT_EQ(ev.certainty().tokens, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_NEAR(ev.certainty().MeanCertainty(1), RouterCertainty(peaked.data(), 8), 1e-6);
  EXPECT_GT(ev.certainty().MeanCertainty(1), 0.5);
  EXPECT_NEAR(ev.certainty().MeanCertainty(2), 0.0, 1e-6);
  EXPECT_DOUBLE_EQ(ev.certainty().MeanCertainty(0), 0.0);  // empty bucket
}

TEST(RecallTallyTest, EmptyIsZero) {
  RecallTally t;
  EXPECT_DOUBLE_EQ(t.Recall(0), 0.0);
  EXPECT_DOUBLE_EQ(t.Overall(), 0.0);
}

}  // namespace
}  // namespace vismoe
