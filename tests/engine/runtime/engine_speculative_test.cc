// Speculative execution through the Engine on the tiny Qwen3-VL-MoE behind the
// offload runtime (router-lookahead prefetch, a throttled copy engine so
// decode steps wait on copies): off by default; on a fixed request set it
// computes experts ahead, keeps some, and the counts and times reach the
// result and the StatsSink (kept + discarded = executed, saved <= bound);
// an all-resident engine computes nothing ahead and gives the exact tokens;
// a one-slab cache runs.
#include <memory>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "gtest/gtest.h"
#include "tests/testing/image_request.h"
#include "tests/testing/offload_budget.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// Sums what the engine reports about speculative executions.
class SpeculationSink final : public NullStatsSink {
 public:
  // Called on the engine's step thread before Generate returns.
  void OnSpeculativeExecutions(uint64_t k, uint64_t d) override {
    kept += k;
    discarded += d;
  }
  uint64_t kept = 0, discarded = 0;
};

// The tiny model behind 1 pinned MoE layer + `slabs` slabs (of the 48 experts
// of its 3 offloaded layers), router-lookahead prefetch, copies at 20 MB/s
// (1.8 ms an expert), so a miss is a wait.
EngineOptions Offloaded(int slabs) {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.num_threads = 1;
  o.max_context_tokens = 512;
  o.offload.pinned_layers = 1;
  o.offload.prefetch = "router-lookahead";
  o.offload.copy_bandwidth_bytes_per_s = 20e6;
  o.gpu_memory_budget_bytes = testing::OffloadBudget(o, 1, slabs);
  return o;
}

std::unique_ptr<Engine> Make(const EngineOptions& o) {
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// A fixed request set: three image requests of 10 new tokens, in order.
struct SetResult {
  std::vector<std::vector<int>> tokens;
  SpeculativeCounts speculative;
};
SetResult RunSet(Engine& engine) {
  SetResult out;
  for (int i = 0; i < 3; ++i) {
    GenerateRequest req = testing::PatternImageRequest(10);
    req.messages[0].content[1].text = std::string("Describe this image, part ") + char('a' + i);
    auto r = engine.Generate(req, {});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) continue;
    out.tokens.push_back(r->token_ids);
    out.speculative.Add(r->speculative);
  }
  return out;
}

TEST(EngineSpeculativeTest, OffByDefault) {
  EXPECT_FALSE(EngineOptions().speculative_execution);
  auto engine = Make(Offloaded(24));
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(RunSet(*engine).speculative.executed, 0u);
}

// The integration check: on a fixed request set under a budget, decode steps
// that wait on copies compute experts of the next layer ahead.
TEST(EngineSpeculativeTest, ComputesAheadOnAFixedRequestSet) {
  EngineOptions o = Offloaded(24);
  SpeculationSink sink;
  o.stats = &sink;
  o.speculative_execution = true;
  auto engine = Make(o);
  ASSERT_NE(engine, nullptr);
  const SetResult on = RunSet(*engine);
  ASSERT_EQ(on.tokens.size(), 3u);
  const SpeculativeCounts& c = on.speculative;
  EXPECT_GT(c.executed, 0u);
  EXPECT_GT(c.kept, 0u);
  EXPECT_EQ(c.kept + c.discarded, c.executed);
  EXPECT_EQ(sink.kept, c.kept);
  EXPECT_EQ(sink.discarded, c.discarded);
  EXPECT_GT(c.wait_seconds, 0.0);
  EXPECT_GT(c.compute_seconds, 0.0);
  EXPECT_LE(c.kept_seconds, c.compute_seconds);
  EXPECT_LE(c.saved_seconds, c.bound_seconds * (1 + 1e-9));
}

TEST(EngineSpeculativeTest, AllResidentEngineComputesNothingAheadAndIsExact) {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.num_threads = 1;
  o.max_context_tokens = 512;
  auto exact_engine = Make(o);
  ASSERT_NE(exact_engine, nullptr);
  const SetResult exact = RunSet(*exact_engine);
  o.speculative_execution = true;
  auto engine = Make(o);
  ASSERT_NE(engine, nullptr);
  const SetResult on = RunSet(*engine);
  EXPECT_EQ(on.tokens, exact.tokens);
  EXPECT_EQ(on.speculative.executed, 0u);
}

TEST(EngineSpeculativeTest, OneSlabCacheRuns) {
  EngineOptions o = Offloaded(1);
  o.speculative_execution = true;
  auto engine = Make(o);
  ASSERT_NE(engine, nullptr);
  const SetResult on = RunSet(*engine);
  ASSERT_EQ(on.tokens.size(), 3u);
  for (const auto& t : on.tokens) EXPECT_FALSE(t.empty());
  EXPECT_EQ(on.speculative.kept + on.speculative.discarded, on.speculative.executed);
}

}  // namespace
}  // namespace vismoe
