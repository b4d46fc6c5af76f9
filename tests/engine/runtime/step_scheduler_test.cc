#include "engine/runtime/step_scheduler.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// A sequence with a text prompt of `prompt` tokens asking for `max_new`
// tokens; compressed prompts (token compression on) cannot be chunked.
struct TestSeq {
  TestSeq(int prompt, int max_new, bool compressed = false, int max_context = 1 << 20)
      : prepared(Request(max_new), MakePrompt(prompt), Compression(compressed), std::nullopt,
                 std::nullopt, 0.0),
        seq(prepared, callbacks, nullptr, {}, nullptr, max_context, {}) {}
  static GenerateRequest Request(int max_new) {
    GenerateRequest r;
    r.sampling.max_new_tokens = max_new;
    return r;
  }
  static Prompt MakePrompt(int n) {
    Prompt p;
    p.ids.assign(static_cast<size_t>(n), 7);
    return p;
  }
  static TokenCompressorOptions Compression(bool on) {
    TokenCompressorOptions o;
    o.kind = on ? "affinity" : "none";
    return o;
  }
  GenerateCallbacks callbacks;
  LocalPrepared prepared;
  Sequence seq;
};

// (sequence, rows) of a step, for comparison.
std::vector<std::pair<Sequence*, int64_t>> Rows(const std::vector<ScheduledChunk>& step) {
  std::vector<std::pair<Sequence*, int64_t>> out;
  for (const ScheduledChunk& c : step) out.push_back({c.seq, c.rows});
  return out;
}

using Pairs = std::vector<std::pair<Sequence*, int64_t>>;

TEST(StepSchedulerTest, LimitsAreChecked) {
  EXPECT_TRUE(CheckStepLimits({4, 16}).ok());
  EXPECT_THAT(CheckStepLimits({0, 16}).message(), HasSubstr("max_running_sequences"));
  EXPECT_THAT(CheckStepLimits({8, 4}).message(), HasSubstr("max_step_tokens"));
}

TEST(StepSchedulerTest, DecodeTokensFirstThenPrefillChunksWithinTheBudget) {
  KvBlockPool pool(1024, 16);
  StepScheduler s({4, 10}, &pool);
  TestSeq a(4, 8), b(30, 8), c(5, 8);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&b.seq).ok());
  ASSERT_TRUE(s.Add(&c.seq).ok());
  // a's whole prompt, then the first 6 of b's 30 (the budget); c waits.
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 4}, {&b.seq, 6}}));
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.waiting(), 1);
  a.seq.prefilled = 4;
  b.seq.prefilled = 6;
  // a decodes (1 row), b continues with 9, nothing left for c.
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 1}, {&b.seq, 9}}));
  b.seq.prefilled = 30;
  // Both decode; c is admitted with the 8 rows left.
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 1}, {&b.seq, 1}, {&c.seq, 5}}));
  EXPECT_EQ(s.running(), 3);
}

TEST(StepSchedulerTest, AdmissionStopsAtMaxRunningAndAtFreeBlocks) {
  KvBlockPool pool(64, 16);  // 4 blocks
  StepScheduler s({2, 100}, &pool);
  TestSeq a(10, 6), b(10, 30), c(1, 1);  // a: 1 block, b: 3 blocks, c: 1 block
  for (TestSeq* t : {&a, &b, &c}) ASSERT_TRUE(s.Add(&t->seq).ok());
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 10}, {&b.seq, 10}}));
  EXPECT_EQ(pool.used_blocks(), 4);
  EXPECT_EQ(a.seq.kv_blocks, 1);
  EXPECT_EQ(b.seq.kv_blocks, 3);
  s.Remove(&a.seq);  // a finished: a running slot and its block come back
  EXPECT_EQ(pool.used_blocks(), 3);
  b.seq.prefilled = 10;
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&b.seq, 1}, {&c.seq, 1}}));
  EXPECT_EQ(pool.used_blocks(), 4);
}

TEST(StepSchedulerTest, TheFirstWaitingSequenceIsNotOvertaken) {
  KvBlockPool pool(64, 16);
  StepScheduler s({4, 100}, &pool);
  TestSeq a(10, 38), big(10, 30), small(1, 1);  // a: 3 blocks, big: 3, small: 1
  for (TestSeq* t : {&a, &big, &small}) ASSERT_TRUE(s.Add(&t->seq).ok());
  // big does not fit beside a; small would, but comes after big.
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 10}}));
  EXPECT_EQ(s.waiting(), 2);
}

TEST(StepSchedulerTest, ACompressedPromptIsPrefilledWholeOrAlone) {
  KvBlockPool pool(1024, 16);
  StepScheduler s({4, 8}, &pool);
  TestSeq a(2, 50), big(20, 4, /*compressed=*/true);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&big.seq).ok());
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 2}}));  // 20 rows do not fit beside a
  a.seq.prefilled = 2;
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 1}}));
  s.Remove(&a.seq);
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&big.seq, 20}}));  // alone, over the budget
}

TEST(StepSchedulerTest, KvNeedIsCappedAtTheContextAndCheckedAgainstThePool) {
  KvBlockPool pool(64, 16);
  StepScheduler s({4, 100}, &pool);
  TestSeq capped(10, 1000, false, /*max_context=*/64);
  EXPECT_EQ(capped.seq.kv_tokens, 64);
  EXPECT_TRUE(s.Add(&capped.seq).ok());
  TestSeq huge(10, 1000);
  absl::Status st = s.Add(&huge.seq);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("KV cache"));
}

TEST(StepSchedulerTest, RemoveIfTakesWaitingAndRunningSequences) {
  KvBlockPool pool(1024, 16);
  StepScheduler s({1, 100}, &pool);
  TestSeq a(3, 3), b(3, 3);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&b.seq).ok());
  s.Schedule();  // a runs, b waits
  std::vector<Sequence*> removed = s.RemoveIf([](const Sequence&) { return true; });
  EXPECT_EQ(removed, (std::vector<Sequence*>{&a.seq, &b.seq}));
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(pool.used_blocks(), 0);
}

}  // namespace
}  // namespace vismoe
