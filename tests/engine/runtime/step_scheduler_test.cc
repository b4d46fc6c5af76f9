#include "engine/runtime/step_scheduler.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// A KV pool of `blocks` 16-token blocks (rows of 1 float: the scheduler only
// counts blocks).
std::unique_ptr<KvPool> Pool(int64_t blocks) {
  return std::make_unique<KvPool>(/*num_layers=*/1, blocks, /*block_tokens=*/16,
                                  /*row_elems=*/1);
}

// A sequence with a text prompt of `prompt` tokens asking for `max_new`
// tokens; compressed prompts (token compression on) cannot be chunked. Its
// context is the whole pool unless given (as the engine's is at most).
struct TestSeq {
  TestSeq(KvPool* pool, int prompt, int max_new, bool compressed = false, int max_context = 0)
      : prepared(Request(max_new), MakePrompt(prompt), Compression(compressed), std::nullopt,
                 std::nullopt, 0.0),
        seq(prepared, callbacks, nullptr, {}, nullptr, nullptr,
            max_context > 0 ? max_context : pool->total_blocks() * pool->block_tokens(), pool, {}) {
  }
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
  int64_t blocks() const { return static_cast<int64_t>(seq.cache->blocks().size()); }
  GenerateCallbacks callbacks;
  LocalPrepared prepared;
  Sequence seq;
};

// What the engine's runner does with a step: the chunk's rows go into the
// cache, and a sequence past its prefill gets a token.
void Ran(const ScheduledStep& step) {
  for (const ScheduledChunk& c : step.chunks) {
    Sequence& s = *c.seq;
    const bool decode = !s.prefilling();
    if (!decode) s.prefilled += c.rows;
    s.cache->Advance(c.rows);
    if (!s.prefilling()) s.result.token_ids.push_back(static_cast<int>(s.cache->length()));
  }
}

// (sequence, rows) of a step, for comparison.
std::vector<std::pair<Sequence*, int64_t>> Rows(const ScheduledStep& step) {
  std::vector<std::pair<Sequence*, int64_t>> out;
  for (const ScheduledChunk& c : step.chunks) out.push_back({c.seq, c.rows});
  return out;
}

using Pairs = std::vector<std::pair<Sequence*, int64_t>>;

TEST(StepSchedulerTest, LimitsAreChecked) {
  EXPECT_TRUE(CheckStepLimits({4, 16}).ok());
  EXPECT_THAT(CheckStepLimits({0, 16}).message(), HasSubstr("max_running_sequences"));
  EXPECT_THAT(CheckStepLimits({8, 4}).message(), HasSubstr("max_step_tokens"));
}

TEST(StepSchedulerTest, DecodeTokensFirstThenPrefillChunksWithinTheBudget) {
  auto pool = Pool(64);
  StepScheduler s({4, 10}, pool.get());
  TestSeq a(pool.get(), 4, 8), b(pool.get(), 30, 8), c(pool.get(), 5, 8);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&b.seq).ok());
  ASSERT_TRUE(s.Add(&c.seq).ok());
  // a's whole prompt, then the first 6 of b's 30 (the budget); c waits.
  ScheduledStep step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 4}, {&b.seq, 6}}));
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.waiting(), 1);
  Ran(step);
  // a decodes (1 row), b continues with 9, nothing left for c.
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 1}, {&b.seq, 9}}));
  Ran(step);
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 1}, {&b.seq, 9}}));
  Ran(step);
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 1}, {&b.seq, 6}, {&c.seq, 3}}));
  Ran(step);
  // Both decode; c goes on with the 2 tokens of its prompt left.
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 1}, {&b.seq, 1}, {&c.seq, 2}}));
  EXPECT_EQ(s.running(), 3);
}

TEST(StepSchedulerTest, AdmissionTakesThePrefillAndFirstTokenBlocks) {
  auto pool = Pool(8);
  StepScheduler s({2, 100}, pool.get());
  // a: 16 + 1 tokens = 2 blocks; b: 40 + 1 = 3 blocks; c waits for a slot.
  TestSeq a(pool.get(), 16, 100), b(pool.get(), 40, 100), c(pool.get(), 1, 1);
  for (TestSeq* t : {&a, &b, &c}) ASSERT_TRUE(s.Add(&t->seq).ok());
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 16}, {&b.seq, 40}}));
  EXPECT_EQ(a.blocks(), 2);
  EXPECT_EQ(b.blocks(), 3);
  EXPECT_EQ(pool->used_blocks(), 5);
  s.Remove(&a.seq);  // a finished: its running slot and blocks come back
  EXPECT_EQ(pool->used_blocks(), 3);
  EXPECT_EQ(a.blocks(), 0);
  b.seq.prefilled = 40;
  b.seq.cache->Advance(40);
  b.seq.result.token_ids.push_back(1);
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&b.seq, 1}, {&c.seq, 1}}));
  EXPECT_EQ(pool->used_blocks(), 4);
}

TEST(StepSchedulerTest, AdmissionLeavesASpareBlockPerRunningSequence) {
  auto pool = Pool(4);
  StepScheduler s({4, 100}, pool.get());
  // Each needs 2 blocks; with a running, b would leave a no block to grow into.
  TestSeq a(pool.get(), 20, 100), b(pool.get(), 20, 100), c(pool.get(), 1, 1);
  for (TestSeq* t : {&a, &b, &c}) ASSERT_TRUE(s.Add(&t->seq).ok());
  // c would fit, but comes after b: first come, first served.
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 20}}));
  EXPECT_EQ(s.waiting(), 2);
  s.Remove(&a.seq);
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&b.seq, 20}, {&c.seq, 1}}));
}

TEST(StepSchedulerTest, DecodingGrowsOneBlockAtEachBoundary) {
  auto pool = Pool(8);
  StepScheduler s({1, 100}, pool.get());
  TestSeq a(pool.get(), 15, 100);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  Ran(s.Schedule());  // the prompt; its first token's row is in the first block
  EXPECT_EQ(a.blocks(), 1);
  for (int t = 16; t <= 40; ++t) {  // decode steps that store tokens 16..40
    ScheduledStep step = s.Schedule();
    ASSERT_EQ(Rows(step), (Pairs{{&a.seq, 1}}));
    EXPECT_EQ(a.blocks(), (t + 15) / 16) << "before storing token " << t;
    Ran(step);
  }
  EXPECT_EQ(pool->used_blocks(), 3);
}

TEST(StepSchedulerTest, TheYoungestPreemptsItselfAndLaterRecomputesItsTokens) {
  auto pool = Pool(4);
  StepScheduler s({4, 100}, pool.get());
  // a: 2 blocks, b: 1 (+1 spare for a = 2 free): both run, one block left.
  TestSeq a(pool.get(), 31, 100), b(pool.get(), 10, 100), c(pool.get(), 10, 100);
  for (TestSeq* t : {&a, &b, &c}) ASSERT_TRUE(s.Add(&t->seq).ok());
  ScheduledStep step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 31}, {&b.seq, 10}}));
  Ran(step);
  EXPECT_EQ(s.waiting(), 1);  // c: 1 block + 2 spare > 1 free
  // a grows into the last free block at token 33; b needs a block at 17.
  while (b.seq.cache->length() < 16) {
    step = s.Schedule();
    ASSERT_TRUE(step.preempted.empty());
    ASSERT_EQ(Rows(step), (Pairs{{&a.seq, 1}, {&b.seq, 1}}));
    Ran(step);
  }
  EXPECT_EQ(pool->free_blocks(), 0);
  const std::vector<int> b_tokens = b.seq.result.token_ids;
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 1}}));
  EXPECT_EQ(step.preempted, (std::vector<Sequence*>{&b.seq}));
  EXPECT_EQ(b.blocks(), 0);
  EXPECT_EQ(pool->free_blocks(), 1);
  EXPECT_EQ(b.seq.cache->length(), 0);
  EXPECT_EQ(b.seq.preemptions, 1);
  EXPECT_EQ(b.seq.replay, static_cast<int64_t>(b_tokens.size()));
  EXPECT_EQ(b.seq.result.token_ids, b_tokens) << "preemption keeps the generated tokens";
  EXPECT_EQ(s.running(), 1);
  EXPECT_EQ(s.waiting(), 2);
  Ran(step);
  // b (10 + 7 recomputed + 1 = 2 blocks, + 1 spare) does not fit beside a.
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 1}}));
  s.Remove(&a.seq);
  // b first (it was preempted): its prompt, then its generated tokens, each a
  // piece of its own; c beside it.
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&b.seq, 10}, {&c.seq, 10}}));
  EXPECT_EQ(b.blocks(), 2);
  Ran(step);
  const int64_t replay = static_cast<int64_t>(b_tokens.size());
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&c.seq, 1}, {&b.seq, replay}}));
  Ran(step);
  EXPECT_EQ(b.seq.cache->length(), 10 + replay);
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&b.seq, 1}, {&c.seq, 1}}));
}

// LongRoPE: a sequence about to decode at the original context is sent back
// and prefills its prompt and generated tokens again (no preemption counted).
TEST(StepSchedulerTest, LongRopeRecomputesASequenceAtTheOriginalContext) {
  auto pool = Pool(8);
  StepScheduler s({4, 100, /*longrope_recompute_at=*/20}, pool.get());
  TestSeq a(pool.get(), 17, 100), b(pool.get(), 30, 100);
  for (TestSeq* t : {&a, &b}) ASSERT_TRUE(s.Add(&t->seq).ok());
  ScheduledStep step = s.Schedule();
  ASSERT_EQ(Rows(step), (Pairs{{&a.seq, 17}, {&b.seq, 30}}));
  Ran(step);
  while (a.seq.cache->length() < 20) {
    step = s.Schedule();
    ASSERT_TRUE(step.recomputed.empty());
    Ran(step);
  }
  const std::vector<int> tokens = a.seq.result.token_ids;
  step = s.Schedule();
  EXPECT_EQ(step.recomputed, (std::vector<Sequence*>{&a.seq}));
  EXPECT_TRUE(step.preempted.empty());
  EXPECT_EQ(a.seq.preemptions, 0);
  EXPECT_EQ(a.seq.replay, static_cast<int64_t>(tokens.size()));
  // b, already past 20, decodes; a comes back with its prompt piece at once.
  EXPECT_EQ(Rows(step), (Pairs{{&b.seq, 1}, {&a.seq, 17}}));
  Ran(step);
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&b.seq, 1}, {&a.seq, static_cast<int64_t>(tokens.size())}}));
  Ran(step);
  EXPECT_EQ(a.seq.cache->length(), 17 + static_cast<int64_t>(tokens.size()));
  EXPECT_GT(a.seq.cache->length(), 20);
  step = s.Schedule();
  EXPECT_TRUE(step.recomputed.empty());
  EXPECT_EQ(Rows(step), (Pairs{{&b.seq, 1}, {&a.seq, 1}}));
}

TEST(StepSchedulerTest, AnOlderSequenceThatMustGrowPreemptsTheYoungest) {
  auto pool = Pool(6);
  StepScheduler s({2, 2}, pool.get());
  // a: 1 block; c: a long prompt prefilled a row a step, 4 blocks + 1 spare.
  TestSeq a(pool.get(), 2, 100), c(pool.get(), 60, 100);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&c.seq).ok());
  ScheduledStep step;
  // a takes the last free block at token 17 and needs another at 33.
  while (a.seq.cache->length() < 32) {
    step = s.Schedule();
    ASSERT_TRUE(step.preempted.empty());
    Ran(step);
  }
  EXPECT_EQ(pool->free_blocks(), 0);
  EXPECT_TRUE(c.seq.prefilling());
  EXPECT_EQ(c.blocks(), 4);
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 1}}));
  EXPECT_EQ(step.preempted, (std::vector<Sequence*>{&c.seq}));
  EXPECT_EQ(a.blocks(), 3);
  EXPECT_EQ(c.blocks(), 0);
  EXPECT_EQ(c.seq.prefilled, 0) << "the preempted prefill starts over";
  EXPECT_EQ(c.seq.replay, 0);
  EXPECT_EQ(s.waiting(), 1);
}

TEST(StepSchedulerTest, ACompressedPromptIsPrefilledWholeOrAlone) {
  auto pool = Pool(64);
  StepScheduler s({4, 8}, pool.get());
  TestSeq a(pool.get(), 2, 50), big(pool.get(), 20, 4, /*compressed=*/true);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&big.seq).ok());
  ScheduledStep step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&a.seq, 2}}));  // 20 rows do not fit beside a
  Ran(step);
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&a.seq, 1}}));
  s.Remove(&a.seq);
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&big.seq, 20}}));  // alone, over the budget
}

// Device scratch is sized by MaxStepRows: no step may carry more rows, not
// even a whole compressed prompt of a full context run alone.
TEST(StepSchedulerTest, NoStepCarriesMoreThanMaxStepRows) {
  EXPECT_EQ(MaxStepRows({4, 8}, 64, 4096), 64);
  EXPECT_EQ(MaxStepRows({4, 2048}, 1024, 4096), 2048);
  // The KV pool holds every row of a step: no step is larger.
  EXPECT_EQ(MaxStepRows({4, 2048}, 1024, 1024), 1024);
  auto pool = Pool(64);
  const StepLimits limits{4, 8};
  const int64_t context = 40;
  StepScheduler s(limits, pool.get());
  TestSeq a(pool.get(), 30, 3, false, context), b(pool.get(), 12, 3, false, context),
      big(pool.get(), 36, 3, /*compressed=*/true, context);
  for (TestSeq* t : {&a, &b, &big}) ASSERT_TRUE(s.Add(&t->seq).ok());
  int64_t most = 0;
  for (int i = 0; i < 40 && !s.empty(); ++i) {
    ScheduledStep step = s.Schedule();
    int64_t rows = 0;
    for (const ScheduledChunk& c : step.chunks) rows += c.rows;
    most = std::max(most, rows);
    Ran(step);
    for (const ScheduledChunk& c : step.chunks) {
      if (c.seq->result.token_ids.size() >= 3) s.Remove(c.seq);  // finished
    }
  }
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(most, 36) << "the compressed prompt ran whole, alone";
  EXPECT_LE(most, MaxStepRows(limits, context, pool->total_blocks() * pool->block_tokens()));
}

TEST(StepSchedulerTest, APreemptedCompressedSequenceRecomputesItsPromptWhole) {
  auto pool = Pool(4);
  StepScheduler s({4, 40}, pool.get());
  TestSeq a(pool.get(), 31, 100), big(pool.get(), 12, 100, /*compressed=*/true);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&big.seq).ok());
  ScheduledStep step = s.Schedule();
  ASSERT_EQ(Rows(step), (Pairs{{&a.seq, 31}}));  // big's 12 rows do not fit beside
  Ran(step);
  step = s.Schedule();
  ASSERT_EQ(Rows(step), (Pairs{{&a.seq, 1}, {&big.seq, 12}}));
  Ran(step);
  while (step.preempted.empty()) {
    step = s.Schedule();
    Ran(step);
  }
  EXPECT_EQ(step.preempted, (std::vector<Sequence*>{&big.seq}));
  const int64_t replay = static_cast<int64_t>(big.seq.result.token_ids.size());
  EXPECT_GT(replay, 1);
  s.Remove(&a.seq);
  step = s.Schedule();
  EXPECT_EQ(Rows(step), (Pairs{{&big.seq, 12}})) << "the compressed prompt, whole, first";
  Ran(step);
  EXPECT_TRUE(big.seq.chunkable()) << "recomputed tokens may be split";
  EXPECT_EQ(Rows(s.Schedule()), (Pairs{{&big.seq, replay}}));
}

TEST(StepSchedulerTest, ASequenceThePoolCannotHoldFailsWithoutTouchingOthers) {
  auto pool = Pool(2);
  KvCache other(pool.get(), 16);  // holds a block outside the scheduler
  ASSERT_TRUE(other.Reserve(16).ok());
  const std::vector<int32_t> other_blocks = other.blocks();
  StepScheduler s({4, 100}, pool.get());
  TestSeq a(pool.get(), 15, 100, false, /*max_context=*/32);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  Ran(s.Schedule());
  ScheduledStep step = s.Schedule();
  ASSERT_EQ(Rows(step), (Pairs{{&a.seq, 1}}));
  Ran(step);
  step = s.Schedule();  // token 17 needs a second block: none, and nobody to preempt
  EXPECT_TRUE(step.chunks.empty());
  ASSERT_EQ(step.failed.size(), 1u);
  EXPECT_EQ(step.failed[0].first, &a.seq);
  EXPECT_EQ(step.failed[0].second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(step.failed[0].second.message(), HasSubstr("KV pool"));
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(a.blocks(), 0);
  EXPECT_EQ(other.blocks(), other_blocks);
  EXPECT_EQ(pool->used_blocks(), 1);
}

TEST(StepSchedulerTest, KvNeedIsCappedAtTheContextAndCheckedAgainstThePool) {
  auto pool = Pool(4);
  StepScheduler s({4, 100}, pool.get());
  TestSeq capped(pool.get(), 10, 1000, false, /*max_context=*/64);
  EXPECT_EQ(capped.seq.kv_tokens, 64);
  EXPECT_TRUE(s.Add(&capped.seq).ok());
  TestSeq huge(pool.get(), 10, 1000, false, /*max_context=*/1 << 20);
  absl::Status st = s.Add(&huge.seq);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("KV cache"));
}

TEST(StepSchedulerTest, RemoveIfTakesWaitingAndRunningSequences) {
  auto pool = Pool(64);
  StepScheduler s({1, 100}, pool.get());
  TestSeq a(pool.get(), 3, 3), b(pool.get(), 3, 3);
  ASSERT_TRUE(s.Add(&a.seq).ok());
  ASSERT_TRUE(s.Add(&b.seq).ok());
  s.Schedule();  // a runs, b waits
  EXPECT_GT(pool->used_blocks(), 0);
  std::vector<Sequence*> removed = s.RemoveIf([](const Sequence&) { return true; });
  EXPECT_EQ(removed, (std::vector<Sequence*>{&a.seq, &b.seq}));
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(pool->used_blocks(), 0);
}

}  // namespace
}  // namespace vismoe
