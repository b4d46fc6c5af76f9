// MoDES expert skipping in the decoder (engine/core/expert_skipping.h) on the
// tiny Qwen3-VL-MoE: thresholds of 0 give bit-identical logits to no rule;
// visual rows use tau_visual and text rows tau_text (also after token
// compression moved them); every MoE layer declares to the provider exactly
// the experts some kept slot needs; in a batch, a sequence without the rule
// is untouched by its neighbour's.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/tiny_decoder.h"
#include "tests/testing/reference_math.h"

namespace vismoe {
namespace {

using testing::Pattern;

// Per MoE layer: the experts some kept slot needs (from the routing the
// observer sees, skipped mask included).
class KeptExperts final : public RouterObserver {
 public:
  void OnRouting(Phase, int layer, const float*, const RouterResult& r) override {
    std::set<int>& s = kept[layer];
    for (size_t i = 0; i < r.experts.size(); ++i) {
      if (r.skipped.empty() || r.skipped[i] == 0) s.insert(r.experts[i]);
    }
  }
  std::map<int, std::set<int>> kept;
};

// What each BeginLayer declared.
class DeclaredExperts final : public ExpertProvider {
 public:
  explicit DeclaredExperts(ExpertProvider* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override {
    declared[layer] = std::set<int>(experts.begin(), experts.end());
    return inner_->BeginLayer(phase, layer, experts);
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    return inner_->Acquire(layer, expert);
  }
  void Release(int layer, int expert) override { inner_->Release(layer, expert); }
  void EndLayer(int layer) override { inner_->EndLayer(layer); }
  std::map<int, std::set<int>> declared;

 private:
  ExpertProvider* inner_;
};

class SkippingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::LoadTinyDecoder(&pool_, &config_, &ckpt_, &model_, &resident_));
    // 4 text, 6 image, 3 text tokens.
    tokens_ = {17, 230, 5, 81};
    tokens_.insert(tokens_.end(), 6, config_.image_token_id);
    tokens_.insert(tokens_.end(), {400, 9, 77});
    visual_ = Pattern(6 * config_.text.hidden_size, 3, 0.5f);
  }

  DecoderInput Input() const {
    DecoderInput in;
    in.tokens = tokens_;
    in.visual_embeds = visual_.data();
    in.num_visual = 6;
    in.all_logits = true;
    return in;
  }

  std::vector<float> Run(const DecoderInput& in, ExpertProvider* experts = nullptr) {
    auto cache = model_->NewKvCache(64);
    std::vector<float> logits;
    const absl::Status st =
        model_->Forward(in, cache.get(), experts != nullptr ? experts : resident_.get(), &logits);
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Qwen3VlMoeModel> model_;
  std::unique_ptr<ResidentExpertProvider> resident_;
  std::vector<int> tokens_;
  std::vector<float> visual_;
};

TEST_F(SkippingTest, ZeroThresholdsAreBitIdenticalToNoRule) {
  const std::vector<float> exact = Run(Input());
  ExpertSkipping zero;
  zero.alpha.assign(config_.text.num_hidden_layers, 3.0f);
  ExpertSkipCounts counts;
  DecoderInput in = Input();
  in.expert_skipping = &zero;
  in.skip_counts = &counts;
  EXPECT_EQ(Run(in), exact);
  const uint64_t layers = config_.text.num_hidden_layers, k = config_.text.num_experts_per_tok;
  EXPECT_EQ(counts.routed[0], 7 * k * layers);
  EXPECT_EQ(counts.routed[1], 6 * k * layers);
  EXPECT_EQ(counts.total_skipped(), 0u);
}

TEST_F(SkippingTest, VisualThresholdSkipsOnlyVisualRows) {
  ExpertSkipping rule;
  rule.tau_visual = 2.0f;  // above every weight: every visual slot goes
  ExpertSkipCounts counts;
  DecoderInput in = Input();
  in.expert_skipping = &rule;
  in.skip_counts = &counts;
  const std::vector<float> skipped = Run(in);
  EXPECT_EQ(counts.skipped[0], 0u);
  EXPECT_GT(counts.skipped[1], 0u);
  EXPECT_EQ(counts.skipped[1], counts.routed[1]);
  EXPECT_NE(skipped, Run(Input()));
  // Swapped: text only.
  ExpertSkipping text;
  text.tau_text = 2.0f;
  ExpertSkipCounts text_counts;
  in.expert_skipping = &text;
  in.skip_counts = &text_counts;
  Run(in);
  EXPECT_EQ(text_counts.skipped[0], text_counts.routed[0]);
  EXPECT_EQ(text_counts.skipped[1], 0u);
}

TEST_F(SkippingTest, AfterCompressionVisualRowsFollowTheirTokens) {
  // Drop the first two image tokens (rows 4, 5) before layer 1; the remaining
  // four visual rows must still use tau_visual.
  ExpertSkipping rule;
  rule.tau_visual = 2.0f;
  ExpertSkipCounts counts;
  DecoderInput in = Input();
  in.expert_skipping = &rule;
  in.skip_counts = &counts;
  in.compress_before_layer = 1;
  const int64_t n = static_cast<int64_t>(tokens_.size());
  in.select_kept_rows = [n]() -> absl::StatusOr<std::vector<int64_t>> {
    std::vector<int64_t> kept;
    for (int64_t r = 0; r < n; ++r) {
      if (r != 4 && r != 5) kept.push_back(r);
    }
    return kept;
  };
  Run(in);
  const uint64_t k = config_.text.num_experts_per_tok;
  const uint64_t later = config_.text.num_hidden_layers - 1;
  EXPECT_EQ(counts.routed[1], 6 * k + 4 * k * later);
  EXPECT_EQ(counts.skipped[1], counts.routed[1]);
  EXPECT_EQ(counts.routed[0], 7 * k * (later + 1));
  EXPECT_EQ(counts.skipped[0], 0u);
}

TEST_F(SkippingTest, ProviderIsAskedOnlyForExpertsAKeptSlotNeeds) {
  ExpertSkipping rule;
  rule.tau_text = 0.2f;
  rule.tau_visual = 0.3f;
  ExpertSkipCounts counts;
  KeptExperts observer;
  DeclaredExperts provider(resident_.get());
  DecoderInput in = Input();
  in.expert_skipping = &rule;
  in.skip_counts = &counts;
  in.observer = &observer;
  Run(in, &provider);
  ASSERT_GT(counts.total_skipped(), 0u);
  ASSERT_LT(counts.total_skipped(), counts.total_routed());
  ASSERT_EQ(provider.declared.size(), static_cast<size_t>(config_.text.num_hidden_layers));
  for (const auto& [layer, declared] : provider.declared) {
    EXPECT_EQ(declared, observer.kept[layer]) << "layer " << layer;
  }
}

TEST_F(SkippingTest, ABatchNeighbourWithoutTheRuleIsUntouched) {
  const std::vector<int> other = {300, 301, 302, 303, 304};
  DecoderInput plain;
  plain.tokens = other;
  plain.all_logits = true;
  const std::vector<float> plain_alone = Run(plain);
  ExpertSkipping rule;
  rule.tau_text = rule.tau_visual = 0.3f;
  DecoderInput skipped = Input();
  skipped.expert_skipping = &rule;
  const std::vector<float> skipped_alone = Run(skipped);

  auto cache_a = model_->NewKvCache(64), cache_b = model_->NewKvCache(64);
  std::vector<float> logits_a, logits_b;
  const std::vector<DecoderBatchEntry> batch = {{&skipped, cache_a.get(), &logits_a},
                                                {&plain, cache_b.get(), &logits_b}};
  ASSERT_TRUE(model_->ForwardBatch(batch, resident_.get()).ok());
  EXPECT_EQ(logits_a, skipped_alone);
  EXPECT_EQ(logits_b, plain_alone);
}

}  // namespace
}  // namespace vismoe
