// MoDES expert skipping through the Engine on the tiny Qwen3-VL-MoE: off by
// default and at zero thresholds the tokens are those of the exact path; the
// request's overrides switch it on and set the thresholds; its counts reach
// the result and the StatsSink by modality; behind the offload runtime it
// moves fewer expert bytes; bad options and overrides are refused by name.
#include <memory>
#include <string>

#include "engine/api/engine.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/image_request.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// Sums what the engine reports about skipping.
class SkipSink final : public NullStatsSink {
 public:
  // Called on the engine's step thread before Generate returns.
  void OnExpertsSkipped(TokenModality m, uint64_t n) override { skipped[static_cast<int>(m)] += n; }
  uint64_t skipped[2] = {0, 0};
};

EngineOptions Base() {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.num_threads = 2;
  o.max_context_tokens = 512;
  return o;
}

std::unique_ptr<Engine> Make(const EngineOptions& o) {
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

TEST(EngineSkippingTest, OffAndZeroThresholdsAreTheExactPath) {
  auto engine = Make(Base());
  ASSERT_NE(engine, nullptr);
  const GenerateRequest req = testing::PatternImageRequest(6);
  auto exact = engine->Generate(req, {});
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->expert_skipping.total_routed(), 0u);  // off: the rule never ran
  GenerateRequest zero = req;
  zero.policy.expert_skipping = "dual-threshold";
  zero.policy.skip_tau_text = 0.0f;
  zero.policy.skip_tau_visual = 0.0f;
  auto same = engine->Generate(zero, {});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->token_ids, exact->token_ids);
  EXPECT_GT(same->expert_skipping.routed[1], 0u);
  EXPECT_GT(same->expert_skipping.routed[0], 0u);
  EXPECT_EQ(same->expert_skipping.total_skipped(), 0u);
}

TEST(EngineSkippingTest, EngineDefaultAndRequestOverridesReachResultAndSink) {
  SkipSink sink;
  EngineOptions o = Base();
  o.stats = &sink;
  o.skipping.kind = "dual-threshold";
  o.skipping.tau_text = 0.0f;
  o.skipping.tau_visual = 0.2f;
  auto engine = Make(o);
  ASSERT_NE(engine, nullptr);
  auto r = engine->Generate(testing::PatternImageRequest(4), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->expert_skipping.skipped[0], 0u);
  EXPECT_GT(r->expert_skipping.skipped[1], 0u);
  EXPECT_LT(r->expert_skipping.skipped[1], r->expert_skipping.routed[1]);
  EXPECT_EQ(sink.skipped[0], 0u);
  EXPECT_EQ(sink.skipped[1], r->expert_skipping.skipped[1]);
  // Per request: text too, and a request can switch it off.
  GenerateRequest both = testing::PatternImageRequest(4);
  both.policy.skip_tau_text = 0.2f;
  auto b = engine->Generate(both, {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT(b->expert_skipping.skipped[0], 0u);
  EXPECT_EQ(sink.skipped[0], b->expert_skipping.skipped[0]);
  GenerateRequest off = testing::PatternImageRequest(4);
  off.policy.expert_skipping = "none";
  auto n = engine->Generate(off, {});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->expert_skipping.total_routed(), 0u);
}

TEST(EngineSkippingTest, BadOptionsAndOverridesAreNamed) {
  EngineOptions o = Base();
  o.skipping.kind = "sometimes";
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("expert_skipping \"sometimes\""));
  o.skipping.kind = "dual-threshold";  // no thresholds, no profile
  e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("skip_tau_text is not set"));

  auto engine = Make(Base());
  ASSERT_NE(engine, nullptr);
  GenerateRequest req = testing::PatternImageRequest(2);
  req.policy.expert_skipping = "dual-threshold";
  req.policy.skip_tau_text = 0.1f;
  auto p = engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.skip_tau_visual is not set"));
  req.policy.skip_tau_visual = -0.5f;
  p = engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.skip_tau_visual must be"));
  req.policy.skip_tau_visual = 0.1f;
  req.policy.expert_skipping = "always";
  p = engine->Prepare(req);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.expert_skipping \"always\""));
}

// Behind the offload runtime with a one-slab cache and with six slabs (the
// pinned prefix empty): more skipping, fewer expert bytes copied; everything
// skipped, none.
TEST(EngineSkippingTest, SkippedExpertsAreNotCopiedBehindTheOffloadRuntime) {
  EngineOptions o = Base();
  auto config = ModelConfig::Load(o.model_path);
  auto ckpt = Checkpoint::Open(o.model_path);
  ASSERT_TRUE(config.ok() && ckpt.ok());
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  o.offload.pinned_layers = 0;
  for (int slabs : {1, 6}) {
    SCOPED_TRACE(slabs);
    o.gpu_memory_budget_bytes = sizes->resident_bytes +
                                (*model)->NewKvCache(o.max_context_tokens)->bytes() +
                                slabs * sizes->expert_bytes;
    auto engine = Make(o);
    ASSERT_NE(engine, nullptr);
    auto bytes = [&](float tau) {
      GenerateRequest req = testing::PatternImageRequest(4);
      req.policy.expert_skipping = "dual-threshold";
      req.policy.skip_tau_text = tau;
      req.policy.skip_tau_visual = tau;
      auto r = engine->Generate(req, {});
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? r->offload.bytes_h2d : 0;
    };
    const uint64_t none = bytes(0.0f), some = bytes(0.2f), all = bytes(2.0f);
    EXPECT_GT(none, 0u);
    EXPECT_LT(some, none);
    EXPECT_EQ(all, 0u);  // every slot skipped: nothing is ever fetched
  }
}

}  // namespace
}  // namespace vismoe
