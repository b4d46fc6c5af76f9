// The commit miss policy through the Engine on the tiny Qwen3-VL-MoE behind
// the offload runtime: "fetch" (the default) and commit at threshold 0 give
// the same tokens and bytes; on a fixed request set, committing every token
// moves fewer expert bytes and the counts reach the result and the StatsSink;
// a request's overrides switch it on; a one-slab cache and an all-resident
// engine work; bad options and overrides are refused by name.
#include <memory>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/image_request.h"
#include "tests/testing/offload_budget.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// Sums what the engine reports about committed experts.
class CommitSink final : public NullStatsSink {
 public:
  // Called on the engine's step thread before Generate returns.
  void OnExpertsCommitted(uint64_t r, uint64_t s) override {
    router += r;
    substitute += s;
  }
  uint64_t router = 0, substitute = 0;
};

// The tiny model behind a budget of 1 pinned MoE layer + `slabs` slabs, with
// history prefetch.
EngineOptions Offloaded(int slabs) {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.num_threads = 2;
  o.max_context_tokens = 512;
  o.offload.pinned_layers = 1;
  o.offload.prefetch = "history";
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
  OffloadStats offload;
  CommitCounts commit;
};
SetResult RunSet(Engine& engine, const PolicyOverrides& policy) {
  SetResult out;
  for (int i = 0; i < 3; ++i) {
    GenerateRequest req = testing::PatternImageRequest(10);
    req.messages[0].content[1].text = std::string("Describe this image, part ") + char('a' + i);
    req.policy = policy;
    auto r = engine.Generate(req, {});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) continue;
    out.tokens.push_back(r->token_ids);
    out.offload.Add(r->offload);
    out.commit.Add(r->commit);
  }
  return out;
}

TEST(EngineCommitTest, FetchAndThresholdZeroAreTheExactPath) {
  const EngineOptions o = Offloaded(8);
  auto fetch_engine = Make(o);
  ASSERT_NE(fetch_engine, nullptr);
  const SetResult fetch = RunSet(*fetch_engine, {});
  EXPECT_EQ(fetch.commit.tokens, 0u);  // fetch: the rule never ran
  EXPECT_GT(fetch.offload.bytes_h2d, 0u);
  auto zero_engine = Make(o);
  ASSERT_NE(zero_engine, nullptr);
  PolicyOverrides zero;
  zero.miss_policy = "commit";
  zero.commit_threshold = 0.0f;
  const SetResult same = RunSet(*zero_engine, zero);
  EXPECT_EQ(same.tokens, fetch.tokens);
  // Nothing committed: every routed expert was fetched as with fetch. (Bytes
  // and hits are not compared: which slab a copy lands in depends on whether
  // the history prefetches had landed, which is timing.)
  EXPECT_GT(same.commit.tokens, 0u);
  EXPECT_EQ(same.commit.uncertain_tokens, 0u);
  EXPECT_EQ(same.commit.committed_router, 0u);
  EXPECT_EQ(same.commit.committed_substitute, 0u);
  EXPECT_GT(same.offload.bytes_h2d, 0u);
}

// The integration check: on the same request set, committing every token
// (a threshold above ln(16)) moves fewer bytes than fetching; with OWA too.
TEST(EngineCommitTest, CommittingMovesFewerBytesOnAFixedRequestSet) {
  for (float alpha1 : {0.0f, 1.3f}) {
    SCOPED_TRACE(alpha1);
    EngineOptions o = Offloaded(8);
    auto fetch_engine = Make(o);
    ASSERT_NE(fetch_engine, nullptr);
    const SetResult fetch = RunSet(*fetch_engine, {});
    CommitSink sink;
    o.stats = &sink;
    o.offload.miss_policy = "commit";
    o.commit.threshold = 100.0f;
    o.commit.owa_alpha1 = alpha1;
    auto commit_engine = Make(o);
    ASSERT_NE(commit_engine, nullptr);
    const SetResult commit = RunSet(*commit_engine, {});
    ASSERT_EQ(commit.tokens.size(), 3u);
    EXPECT_GT(commit.commit.committed_substitute, 0u);
    EXPECT_EQ(commit.commit.uncertain_tokens, commit.commit.tokens);
    EXPECT_LT(commit.offload.bytes_h2d, fetch.offload.bytes_h2d);
    EXPECT_GT(commit.offload.cache_hits * fetch.offload.cache_queries,
              fetch.offload.cache_hits * commit.offload.cache_queries);  // a higher hit ratio
    EXPECT_NE(commit.tokens, fetch.tokens);                              // lossy
    EXPECT_EQ(sink.router, commit.commit.committed_router);
    EXPECT_EQ(sink.substitute, commit.commit.committed_substitute);
    if (alpha1 > 0) {
      EXPECT_GT(commit.commit.owa_tokens, 0u);
    }
  }
}

TEST(EngineCommitTest, RequestOverridesSwitchItOnAndOff) {
  EngineOptions o = Offloaded(8);
  o.offload.miss_policy = "commit";
  o.commit.threshold = 100.0f;
  auto engine = Make(o);
  ASSERT_NE(engine, nullptr);
  PolicyOverrides off;
  off.miss_policy = "fetch";
  EXPECT_EQ(RunSet(*engine, off).commit.tokens, 0u);
  EXPECT_GT(RunSet(*engine, {}).commit.committed_substitute, 0u);
  PolicyOverrides zero;
  zero.commit_threshold = 0.0f;  // the engine's policy, the request's threshold
  const SetResult z = RunSet(*engine, zero);
  EXPECT_GT(z.commit.tokens, 0u);
  EXPECT_EQ(z.commit.uncertain_tokens, 0u);
}

TEST(EngineCommitTest, OneSlabCacheAndAllResidentWork) {
  EngineOptions o = Offloaded(1);
  o.offload.miss_policy = "commit";
  o.commit.threshold = 100.0f;
  auto engine = Make(o);
  ASSERT_NE(engine, nullptr);
  const SetResult one = RunSet(*engine, {});
  ASSERT_EQ(one.tokens.size(), 3u);
  EXPECT_GT(one.commit.tokens, 0u);
  // At most one expert of a layer is there: most misses find no substitute.
  EXPECT_GT(one.commit.fetched, 0u);
  // Everything resident (no budget): nothing to commit to, the exact tokens.
  EngineOptions resident = o;
  resident.gpu_memory_budget_bytes = 0;
  auto r = Make(resident);
  ASSERT_NE(r, nullptr);
  resident.offload.miss_policy = "fetch";
  auto exact = Make(resident);
  ASSERT_NE(exact, nullptr);
  const SetResult all = RunSet(*r, {});
  EXPECT_EQ(all.tokens, RunSet(*exact, {}).tokens);
  EXPECT_EQ(all.commit.tokens, 0u);
}

TEST(EngineCommitTest, BadOptionsAndOverridesAreNamed) {
  EngineOptions o = Offloaded(8);
  o.offload.miss_policy = "sometimes";
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("miss_policy \"sometimes\""));
  o.offload.miss_policy = "commit";  // no threshold, no profile
  e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("commit_threshold is not set"));
  o.commit.threshold = 1.0f;
  o.offload.prefetch = "none";
  e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("runs no expert predictor"));

  o.offload.miss_policy = "fetch";  // the predictor-less engine refuses a committing request
  auto engine = Make(o);
  ASSERT_NE(engine, nullptr);
  GenerateRequest req = testing::PatternImageRequest(2);
  req.policy.miss_policy = "commit";
  req.policy.commit_threshold = 1.0f;
  auto p = engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.miss_policy \"commit\" computes with"));
  req.policy.miss_policy = "always";
  p = engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.miss_policy \"always\""));
  req.policy.miss_policy = "commit";
  req.policy.commit_threshold = -0.5f;
  p = engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.commit_threshold must be"));
  req.policy.commit_threshold = 1.0f;
  req.policy.commit_owa_alpha2 = 0.0f;
  p = engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.commit_owa_alpha2"));
}

// Host execution of misses ("cpu") belongs to the engine's offload provider,
// shared by every request of a step: a request may switch commit on or off
// but not host execution. Commit then runs before the provider, so a "cpu"
// engine serves a committing request and computes its remaining misses on the
// host.
TEST(EngineCommitTest, ARequestCannotChangeHostExecution) {
  EngineOptions fetch_options = Offloaded(8);
  fetch_options.commit.threshold = 1e9f;  // commit every decode token when asked
  auto fetch_engine = Make(fetch_options);
  ASSERT_NE(fetch_engine, nullptr);
  GenerateRequest req = testing::PatternImageRequest(4);
  req.policy.miss_policy = "cpu";
  auto p = fetch_engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("\"cpu\" is an engine-wide setting"));

  EngineOptions cpu_options = fetch_options;
  cpu_options.offload.miss_policy = "cpu";
  auto cpu_engine = Make(cpu_options);
  ASSERT_NE(cpu_engine, nullptr);
  req.policy.miss_policy = "fetch";
  p = cpu_engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("computes misses on the host for every request"));
  req.policy.miss_policy = "cpu";
  EXPECT_TRUE(cpu_engine->Prepare(req).ok());
  req.policy.miss_policy = "commit";
  auto r = cpu_engine->Generate(req, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->commit.tokens, 0u);
}

}  // namespace
}  // namespace vismoe
