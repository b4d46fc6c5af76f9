// The commit miss policy in the decoder (engine/core/commit_miss_policy.h) on
// the tiny Qwen3-VL-MoE, against a provider that says which experts are
// "there": prefill rows always fetch; a decode row at threshold 0 is
// bit-identical to fetching; an uncertain decode row declares only experts
// that are there (its misses replaced by predicted ones); the first MoE layer
// of the first decode step follows the router; observers see the router's own
// routing; in a batch, a sequence without the policy is untouched by its
// neighbour's.
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_decoder.h"

namespace vismoe {
namespace {

// Resident experts, but reports only `there` as available at every layer but
// `pinned`, with `predicted` as the predictor's choice; records declarations.
class ScriptedProvider final : public ExpertProvider {
 public:
  ScriptedProvider(ExpertProvider* inner, std::vector<int> there, std::vector<int> predicted,
                   int num_experts, int pinned)
      : inner_(inner), predicted_(std::move(predicted)), pinned_(pinned) {
    available_.assign(static_cast<size_t>(num_experts), 0);
    for (int e : there) available_[e] = 1;
  }
  ExpertAvailability Availability(int layer) override {
    ++asked;
    if (layer == pinned_) return ExpertAvailability{true, {}, {}};
    return ExpertAvailability{false, available_, predicted_};
  }
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override {
    declared[layer].insert(experts.begin(), experts.end());
    return inner_->BeginLayer(phase, layer, experts);
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    return inner_->Acquire(layer, expert);
  }
  void Release(int layer, int expert) override { inner_->Release(layer, expert); }
  void EndLayer(int layer) override { inner_->EndLayer(layer); }
  bool There(int e) const { return available_[e] != 0; }

  int asked = 0;
  std::map<int, std::set<int>> declared;

 private:
  ExpertProvider* inner_;
  std::vector<uint8_t> available_;
  std::vector<int> predicted_;
  int pinned_;
};

// The routing observers see, per layer.
class SeenRouting final : public RouterObserver {
 public:
  void OnRouting(Phase, int layer, const float*, const RouterResult& r) override {
    experts[layer] = r.experts;
    committed_marks += r.committed.size();
  }
  std::map<int, std::vector<int>> experts;
  size_t committed_marks = 0;
};

class CommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::LoadTinyDecoder(&pool_, &config_, &ckpt_, &model_, &resident_));
    always_.threshold = 100.0f;  // above ln(16): every decode row is uncertain
  }

  // A provider where experts 0-5 are there, 2-5 predicted, layer 0 pinned.
  std::unique_ptr<ScriptedProvider> Scripted() {
    return std::make_unique<ScriptedProvider>(resident_.get(), std::vector<int>{0, 1, 2, 3, 4, 5},
                                              std::vector<int>{2, 3, 4, 5},
                                              config_.text.num_experts, /*pinned=*/0);
  }

  // Prefills `prompt` (fetching), then runs one decode step of `token` under
  // `decode` (the provider given to both); the decode step's logits.
  std::vector<float> PrefillThenDecode(const DecoderInput& decode, ExpertProvider* experts) {
    auto cache = model_->NewKvCache(64);
    std::vector<float> logits;
    DecoderInput prefill;
    prefill.tokens = prompt_;
    EXPECT_TRUE(model_->Forward(prefill, cache.get(), resident_.get(), &logits).ok());
    logits.clear();
    const absl::Status st = model_->Forward(decode, cache.get(), experts, &logits);
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  }

  DecoderInput Decode() const {
    DecoderInput in;
    in.tokens = token_;
    in.phase = Phase::kDecode;
    return in;
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Qwen3VlMoeModel> model_;
  std::unique_ptr<ResidentExpertProvider> resident_;
  CommitMissPolicy always_;
  const std::vector<int> prompt_ = {17, 230, 5, 81, 400, 9};
  const std::vector<int> token_ = {77};
};

TEST_F(CommitTest, PrefillRowsAlwaysFetch) {
  auto scripted = Scripted();
  DecoderInput in;
  in.tokens = prompt_;
  in.all_logits = true;
  std::vector<float> exact, committed;
  auto c1 = model_->NewKvCache(64);
  ASSERT_TRUE(model_->Forward(in, c1.get(), resident_.get(), &exact).ok());
  CommitCounts counts;
  in.commit = &always_;
  in.commit_counts = &counts;
  auto c2 = model_->NewKvCache(64);
  ASSERT_TRUE(model_->Forward(in, c2.get(), scripted.get(), &committed).ok());
  EXPECT_EQ(committed, exact);
  EXPECT_EQ(scripted->asked, 0);
  EXPECT_EQ(counts.tokens, 0u);
}

TEST_F(CommitTest, ThresholdZeroIsBitIdenticalToFetching) {
  const std::vector<float> exact = PrefillThenDecode(Decode(), resident_.get());
  auto scripted = Scripted();
  CommitMissPolicy zero;
  CommitCounts counts;
  DecoderInput in = Decode();
  in.commit = &zero;
  in.commit_counts = &counts;
  EXPECT_EQ(PrefillThenDecode(in, scripted.get()), exact);
  EXPECT_EQ(counts.tokens, 3u);  // one row at each of the 3 offloaded MoE layers
  EXPECT_EQ(counts.uncertain_tokens, 0u);
  EXPECT_EQ(counts.committed(), 0u);
}

TEST_F(CommitTest, UncertainRowsDeclareOnlyWhatIsThere) {
  const std::vector<float> exact = PrefillThenDecode(Decode(), resident_.get());
  auto scripted = Scripted();
  CommitCounts counts;
  DecoderInput in = Decode();
  in.commit = &always_;
  in.commit_counts = &counts;
  SeenRouting seen;
  in.observer = &seen;
  const std::vector<float> committed = PrefillThenDecode(in, scripted.get());
  const int k = config_.text.num_experts_per_tok;
  EXPECT_EQ(counts.tokens, 3u);
  EXPECT_EQ(counts.uncertain_tokens, 3u);
  EXPECT_EQ(counts.committed_router + counts.committed_substitute + counts.fetched, 3u * k);
  EXPECT_GT(counts.committed_substitute, 0u);
  // Every offloaded layer declared the experts there plus those it fetched
  // for want of a substitute; with 4 predicted candidates there is always one.
  uint64_t missing = 0;
  for (int layer = 1; layer < config_.text.num_hidden_layers; ++layer) {
    for (int e : scripted->declared[layer]) EXPECT_TRUE(scripted->There(e)) << layer << " " << e;
    for (int e : seen.experts[layer]) missing += scripted->There(e) ? 0 : 1;
  }
  EXPECT_EQ(counts.fetched, 0u);
  EXPECT_EQ(counts.committed_substitute, missing);  // one substitute per router miss
  EXPECT_EQ(seen.committed_marks, 0u);              // observers saw the router's routing
  EXPECT_NE(committed, exact);
}

TEST_F(CommitTest, FirstDecodeStepFollowsTheRouterAtTheFirstMoeLayer) {
  // Layer 0 not pinned here: every MoE layer has misses.
  ScriptedProvider scripted(resident_.get(), {0, 1, 2, 3, 4, 5}, {2, 3, 4, 5},
                            config_.text.num_experts, /*pinned=*/-1);
  CommitCounts later, first;
  DecoderInput in = Decode();
  in.commit = &always_;
  in.commit_counts = &later;
  PrefillThenDecode(in, &scripted);
  EXPECT_EQ(later.tokens, 4u);
  in.first_decode_step = true;
  in.commit_counts = &first;
  PrefillThenDecode(in, &scripted);
  EXPECT_EQ(first.tokens, 3u);  // layer 0 routed, as in paper 003 (4.1)
}

TEST_F(CommitTest, BatchNeighbourWithoutThePolicyIsUntouched) {
  // Sequence B alone (fetching), then A (committing) and B in one step.
  auto scripted = Scripted();
  auto prefilled = [&](const std::vector<int>& prompt) {
    auto cache = model_->NewKvCache(64);
    DecoderInput p;
    p.tokens = prompt;
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward(p, cache.get(), resident_.get(), &logits).ok());
    return cache;
  };
  const std::vector<int> prompt_b = {3, 99, 12};
  const std::vector<int> token_b = {41};
  auto cache_alone = prefilled(prompt_b);
  DecoderInput b = Decode();
  b.tokens = token_b;
  std::vector<float> alone;
  ASSERT_TRUE(model_->Forward(b, cache_alone.get(), scripted.get(), &alone).ok());

  auto cache_a = prefilled(prompt_);
  auto cache_b = prefilled(prompt_b);
  DecoderInput a = Decode();
  CommitCounts counts;
  a.commit = &always_;
  a.commit_counts = &counts;
  std::vector<float> logits_a, logits_b;
  const DecoderBatchEntry batch[] = {{&a, cache_a.get(), &logits_a},
                                     {&b, cache_b.get(), &logits_b}};
  ASSERT_TRUE(model_->ForwardBatch(batch, scripted.get()).ok());
  EXPECT_EQ(logits_b, alone);
  EXPECT_EQ(counts.tokens, 3u);  // A's row only
  EXPECT_GT(counts.committed_substitute, 0u);
}

}  // namespace
}  // namespace vismoe
