// SequencePreload: the preferred experts of a layer are its top experts by
// the softmax mass of the sequence's prefill rows (decode rows ignored; the
// top-k ids when a backend gives no scores), handed to the provider once at
// Start and released at End (and at Suspend, for a preempted sequence, which
// starts over); no prefill seen, no preload.
#include "engine/policy/sequence_preload.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/offload/fake_expert_source.h"

namespace vismoe {
namespace {

using testing::FakeExpertSource;

// Routing of rows whose logits are given ([n][E]); top-1 ids by logit.
RouterResult Routing(const std::vector<std::vector<float>>& rows) {
  RouterResult r;
  r.n = static_cast<int64_t>(rows.size());
  r.num_experts = static_cast<int>(rows[0].size());
  r.top_k = 1;
  for (const auto& row : rows) {
    r.logits.insert(r.logits.end(), row.begin(), row.end());
    int best = 0;
    for (int e = 1; e < r.num_experts; ++e) best = row[e] > row[best] ? e : best;
    r.experts.push_back(best);
    r.weights.push_back(1.0f);
  }
  return r;
}

class SequencePreloadTest : public ::testing::Test {
 protected:
  SequencePreloadTest() : src_(3, 4, 8, 4, ExpertWeights::Layout::kFusedTransposed) {
    OffloadOptions o;
    o.preload_share = 1.0;
    auto p = OffloadExpertProvider::Create(src_, src_.Config(1), src_.Plan(1, 6), o, nullptr);
    EXPECT_TRUE(p.ok()) << p.status();
    provider_ = std::move(*p);
  }
  FakeExpertSource src_;
  std::unique_ptr<OffloadExpertProvider> provider_;
};

TEST_F(SequencePreloadTest, TopExpertsByPrefillRoutingMass) {
  SequencePreload s(provider_.get(), 3, 4, 2);
  // Layer 1: 3 then 0 by summed softmax probability; layer 2: 2 then 3.
  const std::vector<std::vector<float>> rows = {{1.0f, 0.0f, -9.0f, 1.1f},
                                                {1.0f, 0.5f, -9.0f, 1.05f}};
  s.OnRouting(Phase::kPrefill, 1, nullptr, Routing(rows));
  s.OnRouting(Phase::kPrefill, 2, nullptr, Routing({{0.0f, 0.0f, 3.0f, 2.0f}}));
  // Decode rows change nothing.
  s.OnRouting(Phase::kDecode, 2, nullptr, Routing({{9.0f, 9.0f, 0.0f, 0.0f}}));
  const std::vector<std::vector<int>> want = {{}, {3, 0}, {2, 3}};
  EXPECT_EQ(s.Preferred(), want);
  EXPECT_EQ(provider_->ProtectedExperts(), 0);
  s.Start();
  EXPECT_TRUE(s.started());
  EXPECT_EQ(provider_->ProtectedExperts(), 4);
  EXPECT_EQ(provider_->TakeRequestStats().preload_issued, 4u);
  s.OnRouting(Phase::kPrefill, 1, nullptr, Routing({{0.0f, 0.0f, 9.0f, 0.0f}}));
  EXPECT_EQ(s.Preferred(), want) << "rows after Start are not the prefill's";
  s.Start();  // once
  EXPECT_EQ(provider_->TakeRequestStats().preload_issued, 0u);
  s.End();
  EXPECT_EQ(provider_->ProtectedExperts(), 0);
  s.End();  // idempotent
}

TEST_F(SequencePreloadTest, MassNotVotes) {
  // Expert 1 is every row's second choice by a hair, never top-1; expert 0
  // and 2 split the top-1 votes: by mass 1 ranks first.
  SequencePreload s(provider_.get(), 3, 4, 1);
  s.OnRouting(Phase::kPrefill, 1, nullptr,
              Routing({{2.0f, 1.9f, -5.0f, -5.0f}, {-5.0f, 1.9f, 2.0f, -5.0f}}));
  EXPECT_EQ(s.Preferred()[1], std::vector<int>{1});
}

TEST_F(SequencePreloadTest, TopKIdsWithoutScores) {
  SequencePreload s(provider_.get(), 3, 4, 2);
  RouterResult r;
  r.n = 3;
  r.num_experts = 4;
  r.top_k = 2;
  r.experts = {1, 2, 2, 0, 3, 2};  // 2 three times, then 0, 1, 3 once each
  s.OnRouting(Phase::kPrefill, 2, nullptr, r);
  EXPECT_EQ(s.Preferred()[2], (std::vector<int>{2, 0}));
}

TEST_F(SequencePreloadTest, NoPrefillNoPreload) {
  {
    SequencePreload s(provider_.get(), 3, 4, 2);
    s.OnRouting(Phase::kDecode, 1, nullptr, Routing({{1.0f, 0.0f, 0.0f, 0.0f}}));
    s.Start();
    EXPECT_EQ(provider_->ProtectedExperts(), 0);
  }
  {
    // Ended (cancelled in its prefill) before it started: Start does nothing.
    SequencePreload s(provider_.get(), 3, 4, 2);
    s.OnRouting(Phase::kPrefill, 1, nullptr, Routing({{1.0f, 0.0f, 0.0f, 0.0f}}));
    s.End();
    s.Start();
    EXPECT_EQ(provider_->ProtectedExperts(), 0);
  }
  {
    // Destroyed without End: its experts are released.
    SequencePreload s(provider_.get(), 3, 4, 2);
    s.OnRouting(Phase::kPrefill, 1, nullptr, Routing({{1.0f, 0.0f, 0.0f, 0.0f}}));
    s.Start();
    EXPECT_EQ(provider_->ProtectedExperts(), 2);
  }
  EXPECT_EQ(provider_->ProtectedExperts(), 0);
}

// Preempted: the protection goes while the sequence waits, the mass starts
// over (its prompt is prefilled again, not counted twice), and Start after
// that prefill preloads again; once ended, Suspend does nothing.
TEST_F(SequencePreloadTest, SuspendReleasesAndStartsOver) {
  SequencePreload s(provider_.get(), 3, 4, 1);
  s.OnRouting(Phase::kPrefill, 1, nullptr, Routing({{3.0f, 0.0f, 0.0f, 0.0f}}));
  s.Suspend();  // preempted mid-prefill: nothing to release, the chunk is forgotten
  EXPECT_FALSE(s.started());
  EXPECT_EQ(s.Preferred(), (std::vector<std::vector<int>>{{}, {}, {}}));
  s.OnRouting(Phase::kPrefill, 1, nullptr, Routing({{0.0f, 3.0f, 0.0f, 0.0f}}));
  s.Start();
  EXPECT_EQ(s.Preferred()[1], std::vector<int>{1});
  EXPECT_EQ(provider_->ProtectedExperts(), 1);
  (void)provider_->TakeRequestStats();
  s.Suspend();  // preempted while decoding
  EXPECT_FALSE(s.started());
  EXPECT_EQ(provider_->ProtectedExperts(), 0);
  s.OnRouting(Phase::kPrefill, 1, nullptr, Routing({{0.0f, 0.0f, 3.0f, 0.0f}}));
  s.Start();
  EXPECT_EQ(s.Preferred()[1], std::vector<int>{2}) << "only the second prefill's mass";
  EXPECT_EQ(provider_->ProtectedExperts(), 1);
  EXPECT_EQ(provider_->TakeRequestStats().preload_issued, 1u);
  s.End();
  EXPECT_EQ(provider_->ProtectedExperts(), 0);
  s.Suspend();
  s.Start();
  EXPECT_EQ(provider_->ProtectedExperts(), 0) << "ended stays ended";
}

}  // namespace
}  // namespace vismoe
