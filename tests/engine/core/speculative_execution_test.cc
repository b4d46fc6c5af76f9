// The speculative execution rule (engine/core/speculative_execution.h): which
// units are planned (per expert of the predicted top-k that is there, most
// predicted weight first; none when every expert is resident), which slots
// keep a speculative output (the router agrees; never a skipped slot; only
// the sequence's rows), the counts, and the time accounting (t_copy, bound,
// saved, shares).
#include "engine/core/speculative_execution.h"

#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

// Routing of n rows over E experts, top-k, from per-row experts and weights.
RouterResult Routing(int num_experts, int k, std::vector<int> experts, std::vector<float> weights) {
  RouterResult r;
  r.num_experts = num_experts;
  r.top_k = k;
  r.n = static_cast<int64_t>(experts.size()) / k;
  r.experts = std::move(experts);
  r.weights = std::move(weights);
  return r;
}

ExpertAvailability There(int num_experts, std::vector<int> ids) {
  ExpertAvailability a;
  a.available.assign(static_cast<size_t>(num_experts), 0);
  for (int e : ids) a.available[e] = 1;
  return a;
}

TEST(PlanSpeculationTest, OneUnitPerPredictedExpertThereMostWeightFirst) {
  // Row 0 predicts 3 (0.6), 1 (0.4); row 1 predicts 1 (0.7), 5 (0.3).
  const RouterResult predicted = Routing(8, 2, {3, 1, 1, 5}, {0.6f, 0.4f, 0.7f, 0.3f});
  const std::vector<SpeculationUnit> units = PlanSpeculation(predicted, There(8, {1, 3, 5, 6}));
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0].expert, 1);  // 0.4 + 0.7
  EXPECT_EQ(units[0].rows, (std::vector<int64_t>{0, 1}));
  EXPECT_NEAR(units[0].weight, 1.1, 1e-6);
  EXPECT_EQ(units[1].expert, 3);
  EXPECT_EQ(units[1].rows, (std::vector<int64_t>{0}));
  EXPECT_EQ(units[2].expert, 5);
  EXPECT_EQ(units[2].rows, (std::vector<int64_t>{1}));
}

TEST(PlanSpeculationTest, ExpertsNeitherHeldNorCopyingAreLeftOut) {
  const RouterResult predicted = Routing(8, 2, {3, 1}, {0.6f, 0.4f});
  const std::vector<SpeculationUnit> units = PlanSpeculation(predicted, There(8, {1}));
  ASSERT_EQ(units.size(), 1u);
  EXPECT_EQ(units[0].expert, 1);
  EXPECT_TRUE(PlanSpeculation(predicted, There(8, {})).empty());  // a one-slab cache, taken
}

TEST(PlanSpeculationTest, AllExpertsResidentMeansNothingToHide) {
  const RouterResult predicted = Routing(8, 2, {3, 1}, {0.6f, 0.4f});
  ExpertAvailability all;
  all.all = true;
  EXPECT_TRUE(PlanSpeculation(predicted, all).empty());
}

TEST(PlanSpeculationTest, TiesGoToTheLowerId) {
  const RouterResult predicted = Routing(8, 2, {6, 2}, {0.5f, 0.5f});
  const std::vector<SpeculationUnit> units = PlanSpeculation(predicted, There(8, {2, 6}));
  ASSERT_EQ(units.size(), 2u);
  EXPECT_EQ(units[0].expert, 2);
  EXPECT_EQ(units[1].expert, 6);
}

SpeculationRecord Record(std::vector<SpeculatedPair> pairs, std::vector<int64_t> rows) {
  SpeculationRecord r;
  r.layer = 2;
  r.pairs = std::move(pairs);
  r.rows = std::move(rows);
  return r;
}

TEST(MatchSpeculationTest, KeptWhereTheRouterAgreesDiscardedElsewhere) {
  // Rows 0 and 1 route to {1, 4} and {2, 3}; computed ahead: (0, 4), (0, 5), (1, 2).
  RouterResult routing = Routing(8, 2, {1, 4, 2, 3}, {0.5f, 0.5f, 0.5f, 0.5f});
  const SpeculationRecord record = Record({{0, 4, 0.1}, {0, 5, 0.2}, {1, 2, 0.4}}, {0, 1});
  SpeculativeCounts c;
  MatchSpeculation(record, 0, 2, &routing, &c);
  EXPECT_EQ(c.executed, 3u);
  EXPECT_EQ(c.kept, 2u);
  EXPECT_EQ(c.discarded, 1u);
  EXPECT_DOUBLE_EQ(c.compute_seconds, 0.7);
  EXPECT_DOUBLE_EQ(c.kept_seconds, 0.5);
  EXPECT_EQ(routing.speculative, (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_TRUE(routing.IsSpeculative(0, 1));
  EXPECT_FALSE(routing.IsSpeculative(1, 1));
}

TEST(MatchSpeculationTest, NothingKeptLeavesTheRoutingAsItWas) {
  RouterResult routing = Routing(8, 2, {1, 4}, {0.5f, 0.5f});
  SpeculativeCounts c;
  MatchSpeculation(Record({{0, 6, 0.1}}, {0}), 0, 1, &routing, &c);
  EXPECT_TRUE(routing.speculative.empty());  // the exact path's routing
  EXPECT_EQ(c.discarded, 1u);
  MatchSpeculation(Record({}, {}), 0, 1, &routing, &c);
  EXPECT_TRUE(routing.speculative.empty());
}

TEST(MatchSpeculationTest, ASkippedSlotIsNeverKept) {
  RouterResult routing = Routing(8, 2, {1, 4}, {0.5f, 0.5f});
  routing.skipped = {0, 1};  // slot 1 (expert 4) adds nothing
  SpeculativeCounts c;
  MatchSpeculation(Record({{0, 4, 0.1}}, {0}), 0, 1, &routing, &c);
  EXPECT_EQ(c.kept, 0u);
  EXPECT_EQ(c.discarded, 1u);
  EXPECT_TRUE(routing.speculative.empty());
}

TEST(MatchSpeculationTest, OnlyTheSequencesRows) {
  // Rows 0-1 are sequence A, row 2 sequence B; B's pair is not A's count.
  RouterResult routing = Routing(8, 1, {3, 3, 3}, {1, 1, 1});
  const SpeculationRecord record = Record({{1, 3, 0.1}, {2, 3, 0.1}}, {0, 1, 2});
  SpeculativeCounts a, b;
  MatchSpeculation(record, 0, 2, &routing, &a);
  EXPECT_EQ(a.executed, 1u);
  EXPECT_EQ(routing.speculative, (std::vector<uint8_t>{0, 1, 0}));
  MatchSpeculation(record, 2, 1, &routing, &b);
  EXPECT_EQ(b.kept, 1u);
  EXPECT_EQ(routing.speculative, (std::vector<uint8_t>{0, 1, 1}));
}

TEST(AccountSpeculationTimeTest, BoundIsMinOfCopyWaitAndComputeSavedIsKeptMinusTargetWait) {
  RouterResult routing = Routing(8, 2, {1, 4}, {0.5f, 0.5f});
  SpeculationRecord record = Record({{0, 4, 0.003}, {0, 6, 0.002}}, {0});
  record.wait_before = 0.010;
  record.overrun = 0.001;
  record.compute = 0.004;
  record.wait_at_target = 0.001;
  SpeculativeCounts c;
  MatchSpeculation(record, 0, 1, &routing, &c);
  AccountSpeculationTime(record, routing, 0, 1, &c);
  EXPECT_DOUBLE_EQ(c.wait_seconds, 0.010);
  EXPECT_DOUBLE_EQ(c.overrun_seconds, 0.001);
  EXPECT_DOUBLE_EQ(c.bound_seconds, 0.004);  // min(t_copy 10 ms, t_compute 4 ms)
  EXPECT_DOUBLE_EQ(c.saved_seconds, 0.002);  // 3 ms kept, 1 ms of it absorbed at the target
  EXPECT_LE(c.saved_seconds, c.bound_seconds);
  // A wait at the target longer than the kept compute: nothing saved.
  record.wait_at_target = 0.005;
  SpeculativeCounts late;
  AccountSpeculationTime(record, routing, 0, 1, &late);
  EXPECT_EQ(late.saved_seconds, 0.0);
  // The wait ran short of compute: the bound is the wait.
  record.wait_before = 0.001;
  SpeculativeCounts short_wait;
  AccountSpeculationTime(record, routing, 0, 1, &short_wait);
  EXPECT_DOUBLE_EQ(short_wait.bound_seconds, 0.001);
}

TEST(AccountSpeculationTimeTest, SequencesShareByRowsAndKeptSeconds) {
  // A: rows 0-1, kept 3 ms; B: row 2, kept 1 ms. Saved 4 - 2 = 2 ms in all.
  RouterResult routing = Routing(8, 1, {3, 3, 3}, {1, 1, 1});
  SpeculationRecord record = Record({{0, 3, 0.002}, {1, 3, 0.001}, {2, 3, 0.001}}, {0, 1, 2});
  record.wait_before = 0.006;
  record.compute = 0.009;
  record.wait_at_target = 0.002;
  SpeculativeCounts a, b;
  MatchSpeculation(record, 0, 2, &routing, &a);
  MatchSpeculation(record, 2, 1, &routing, &b);
  AccountSpeculationTime(record, routing, 0, 2, &a);
  AccountSpeculationTime(record, routing, 2, 1, &b);
  EXPECT_DOUBLE_EQ(a.wait_seconds, 0.004);
  EXPECT_DOUBLE_EQ(b.wait_seconds, 0.002);
  EXPECT_NEAR(a.saved_seconds, 0.0015, 1e-12);
  EXPECT_NEAR(b.saved_seconds, 0.0005, 1e-12);
  EXPECT_NEAR(a.bound_seconds + b.bound_seconds, 0.006, 1e-12);
  SpeculativeCounts none;  // a sequence not armed gets nothing
  AccountSpeculationTime(Record({}, {0}), routing, 1, 2, &none);
  EXPECT_EQ(none.wait_seconds, 0.0);
}

TEST(SpeculativeExecutionTest, DefaultVectorsAreCheckedAndLookedUp) {
  SpeculativeExecution s;
  s.hidden_size = 2;
  EXPECT_EQ(s.DefaultVector(0), nullptr);  // none: d = 0
  EXPECT_TRUE(ValidateSpeculativeExecution(s, 3, "profile").ok());
  s.default_vectors = {1, 2, 3, 4, 5, 6};
  EXPECT_TRUE(ValidateSpeculativeExecution(s, 3, "profile").ok());
  ASSERT_NE(s.DefaultVector(2), nullptr);
  EXPECT_EQ(s.DefaultVector(2)[0], 5);
  EXPECT_EQ(s.DefaultVector(3), nullptr);
  s.default_vectors.pop_back();
  const absl::Status bad = ValidateSpeculativeExecution(s, 3, "profile");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("profile: default vectors have 5 values, expected 3 layers x "
                               "hidden 2"),
            absl::string_view::npos)
      << bad;
}

TEST(SpeculativeCountsTest, AddSumsEveryField) {
  SpeculativeCounts a{1, 2, 3, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  a.Add(a);
  EXPECT_EQ(a.executed, 2u);
  EXPECT_EQ(a.kept, 4u);
  EXPECT_EQ(a.discarded, 6u);
  EXPECT_DOUBLE_EQ(a.compute_seconds, 0.2);
  EXPECT_DOUBLE_EQ(a.kept_seconds, 0.4);
  EXPECT_DOUBLE_EQ(a.saved_seconds, 0.6);
  EXPECT_DOUBLE_EQ(a.bound_seconds, 0.8);
  EXPECT_DOUBLE_EQ(a.wait_seconds, 1.0);
  EXPECT_DOUBLE_EQ(a.overrun_seconds, 1.2);
}

}  // namespace
}  // namespace vismoe
