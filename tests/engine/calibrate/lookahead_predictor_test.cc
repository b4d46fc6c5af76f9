// Lookahead predictor pieces: Eq. 9 targets on a hand-worked case, Hot
// Recall@B, the trained mlp-lookahead against random choice and the history
// predictor on held-out decode traces of the tiny fixture, and the profile
// round trip.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/calibrate/mlp_trainer.h"
#include "engine/calibrate/routing_trace.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/policy/decayed_target.h"
#include "engine/policy/history_predictor.h"
#include "engine/policy/mlp_lookahead.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatEq;

TEST(DecayedTargetTest, HandWorkedEq9) {
  // Layers 0..4; predicting at layer 0 with W = 3, gamma = 0.5:
  // d=1 (layer 1) {1, 2} -> 1; d=2 (layer 2) {2, 3} -> 0.5; d=3 (layer 3) {0} -> 0.25;
  // layer 4 is outside the window. Expert 2 takes the max (1).
  const std::vector<std::vector<int>> act = {{5}, {1, 2}, {2, 3}, {0}, {4}};
  EXPECT_THAT(
      DecayedTarget(act, 0, 3, 0.5f, 6),
      ElementsAre(FloatEq(0.25f), FloatEq(1), FloatEq(1), FloatEq(0.5f), FloatEq(0), FloatEq(0)));
  // Near the end the window is cut: from layer 3 only layer 4 remains.
  EXPECT_THAT(DecayedTarget(act, 3, 5, 0.8f, 6),
              ElementsAre(FloatEq(0), FloatEq(0), FloatEq(0), FloatEq(0), FloatEq(1), FloatEq(0)));
}

TEST(HotRecallTest, CountsActualInTopB) {
  const std::vector<float> scores = {0.1f, 0.9f, 0.5f, 0.7f};
  EXPECT_DOUBLE_EQ(HotRecallAtB(scores, std::vector<int>{1, 2}, 2), 0.5);
  EXPECT_DOUBLE_EQ(HotRecallAtB(scores, std::vector<int>{1, 3}, 2), 1.0);
  EXPECT_DOUBLE_EQ(HotRecallAtB(scores, std::vector<int>{}, 2), 1.0);
}

// Decode traces of the tiny model: `prompts` random prompts, `steps` greedy
// decode steps each.
std::vector<std::vector<StepRecord>> RecordTraces(int prompts, int steps) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(config.ok() && ckpt.ok());
  ThreadPool pool(1);
  auto experts =
      ResidentExpertProvider::Create(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  EXPECT_TRUE(experts.ok() && model.ok());
  std::mt19937_64 rng(42);
  std::vector<std::vector<StepRecord>> out;
  for (int p = 0; p < prompts; ++p) {
    RoutingTraceRecorder rec(config->text.hidden_size);
    std::vector<int> tokens(12);
    for (int& t : tokens) t = static_cast<int>(rng() % 2000);
    auto cache = (*model)->NewKvCache(64);
    DecoderInput in;
    in.tokens = tokens;
    in.observer = &rec;
    std::vector<float> logits;
    EXPECT_TRUE((*model)->Forward(in, cache.get(), experts->get(), &logits).ok());
    for (int s = 0; s < steps; ++s) {
      // Sample (not argmax) so the random model does not loop on one token.
      const int next = static_cast<int>(rng() % 2000);
      DecoderInput d;
      d.tokens = absl::MakeConstSpan(&next, 1);
      d.phase = Phase::kDecode;
      d.observer = &rec;
      EXPECT_TRUE((*model)->Forward(d, cache.get(), experts->get(), &logits).ok());
    }
    out.push_back(rec.steps());
  }
  return out;
}

TEST(MlpLookaheadTest, BeatsRandomAndHistoryOnHeldOutTraces) {
  constexpr int kB = 4;  // = top-k; random recall is B / E = 0.25
  constexpr int kExperts = 16;
  const auto traces = RecordTraces(/*prompts=*/10, /*steps=*/16);
  std::vector<LookaheadSample> train;
  std::vector<LookaheadExample> test;
  std::vector<std::vector<StepRecord>> test_traces;
  for (size_t p = 0; p < traces.size(); ++p) {
    auto ex = BuildLookaheadExamples(traces[p], Phase::kDecode, {}, /*window=*/5, /*gamma=*/0.8f);
    if (p < 8) {
      for (auto& e : ex) train.push_back(e.sample);
    } else {
      test.insert(test.end(), ex.begin(), ex.end());
      test_traces.push_back(traces[p]);
    }
  }
  ASSERT_GT(train.size(), 100u);
  MlpTrainOptions opt;
  opt.seed = 1;
  float loss = 0;
  auto mlp = TrainMlpLookahead(train, opt, &loss);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  double mlp_recall = 0;
  for (const auto& e : test)
    mlp_recall += HotRecallAtB(mlp->Predict(e.sample.x), e.next_experts, kB);
  mlp_recall /= static_cast<double>(test.size());

  // History: decayed frequency of each layer's experts over earlier steps of
  // the same request, asked for the next layer.
  double hist_recall = 0;
  int hist_n = 0;
  for (const auto& trace : test_traces) {
    HistoryPredictor hist(4, kExperts, 0.8);
    for (const StepRecord& step : trace) {
      for (size_t m = 0; step.phase == Phase::kDecode && m + 1 < step.layers.size(); ++m) {
        std::vector<float> scores(kExperts);
        for (int e = 0; e < kExperts; ++e) {
          scores[e] = static_cast<float>(hist.Score(step.layers[m + 1].layer, e));
        }
        hist_recall += HotRecallAtB(scores, step.layers[m + 1].experts, kB);
        ++hist_n;
      }
      for (const LayerRecord& l : step.layers) hist.Observe(l.layer, l.experts);
    }
  }
  hist_recall /= hist_n;
  std::printf(
      "[hot-recall@%d] mlp-lookahead %.3f  history %.3f  random %.3f  (train loss %.4f, "
      "%zu train / %zu test samples)\n",
      kB, mlp_recall, hist_recall, static_cast<double>(kB) / kExperts, loss, train.size(),
      test.size());
  EXPECT_GT(mlp_recall, static_cast<double>(kB) / kExperts + 0.05);
  EXPECT_GT(mlp_recall, hist_recall);
}

TEST(MlpLookaheadTest, ProfileRoundTrips) {
  std::vector<LookaheadSample> s(8);
  for (int i = 0; i < 8; ++i) {
    s[i].x = {static_cast<float>(i), 1.0f - i * 0.1f, 0.5f};
    s[i].target = {i % 2 ? 1.0f : 0.0f, 0.8f};
  }
  MlpTrainOptions opt;
  opt.hidden1 = 6;
  opt.hidden2 = 3;
  opt.epochs = 3;
  auto mlp = TrainMlpLookahead(s, opt);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const std::string path = testing::BinaryDir() + "/mlp_lookahead_roundtrip.safetensors";
  ASSERT_TRUE(mlp->Save(path).ok());
  auto back = MlpLookahead::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->input_dim(), 3);
  EXPECT_EQ(back->num_experts(), 2);
  EXPECT_EQ(back->Predict(s[3].x), mlp->Predict(s[3].x));
  std::filesystem::remove(path);
  EXPECT_FALSE(TrainMlpLookahead({s[0]}, opt).ok());
}

}  // namespace
}  // namespace vismoe
