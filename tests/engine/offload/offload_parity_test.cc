// Label parity: with the offload runtime, logits and greedy tokens are
// bit-identical to the all-resident run for every budget from the minimum
// (no pinned layer, one slab) to everything resident, on the tiny
// Qwen3-VL-MoE text cases; and through the public Engine API. Also with host
// execution (miss policy cpu, static host layers): on the CPU backend an
// expert computed from the host store runs the same kernels on the same bytes
// as from a slab, so the logits stay bit-identical.
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/api/engine.h"
#include "engine/runtime/sampler.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/greedy_decode.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

constexpr int kDecodeSteps = 8;

TEST(OffloadParityTest, EveryBudgetMatchesResidentBitForBit) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::string prefix = Qwen3VlMoeModel::TextPrefix(*config);
  auto resident = ResidentExpertProvider::Create(**ckpt, config->text, prefix);
  ASSERT_TRUE(resident.ok()) << resident.status();
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sizes = MeasureModelSizes(**ckpt, config->text, prefix);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  const nlohmann::json cases = testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());

  std::vector<std::vector<std::vector<float>>> want;
  std::vector<std::vector<int>> want_tokens;
  for (const auto& c : cases) {
    want_tokens.emplace_back();
    want.push_back(testing::GreedyLogits(**model, resident->get(),
                                         c["input_ids"].get<std::vector<int>>(), kDecodeSteps,
                                         nullptr, &want_tokens.back()));
  }
  const int num_moe = static_cast<int>(sizes->moe_layers.size());
  const int e = config->text.num_experts;
  struct Variant {
    int pinned;
    int slabs;  // -1 = every offloaded expert
    const char* eviction;
    const char* prefetch;
    bool packed = false;  // a packed host copy of the experts instead of the mapped checkpoint
  };
  std::vector<Variant> variants = {
      {0, 1, "lru", "none"},        {0, 1, "lfu", "history"},  {0, 2, "guarded", "history"},
      {0, 7, "lru", "history"},     {1, 1, "lru", "none"},     {1, 13, "lfu", "none"},
      {2, 5, "guarded", "history"}, {0, -1, "lru", "history"}, {num_moe - 1, 1, "lru", "history"},
      {num_moe, 0, "lru", "none"},  {0, 1, "lru", "history", true},
      {1, 13, "guarded", "history", true}};
  for (const Variant& v : variants) {
    MemoryPlanOptions po;
    po.pinned_layers = v.pinned;
    const int slabs = v.slabs < 0 ? (num_moe - v.pinned) * e : v.slabs;
    po.budget_bytes =
        sizes->resident_bytes + (static_cast<int64_t>(v.pinned) * e + slabs) * sizes->expert_bytes;
    auto plan = MakeMemoryPlan(*sizes, po);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->num_slabs, slabs);
    OffloadOptions oo;
    oo.eviction = v.eviction;
    oo.prefetch = v.prefetch;
    oo.host_experts = v.packed ? "packed" : "mapped";
    auto offload = OffloadExpertProvider::Create(**resident, config->text, *plan, oo, nullptr);
    ASSERT_TRUE(offload.ok()) << offload.status();
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "pinned " << v.pinned << " slabs " << slabs << " "
                                        << v.eviction << "/" << v.prefetch << (v.packed ? " packed" : "")
                                        << " case " << i);
      std::vector<int> tokens;
      auto got = testing::GreedyLogits(**model, offload->get(),
                                       cases[i]["input_ids"].get<std::vector<int>>(), kDecodeSteps,
                                       nullptr, &tokens);
      EXPECT_EQ(tokens, want_tokens[i]);
      EXPECT_TRUE(testing::BitIdentical(got, want[i]));
    }
    const OffloadStats s = (*offload)->TakeRequestStats();
    if (slabs > 0 && slabs < (num_moe - v.pinned) * e) {
      EXPECT_GT(s.bytes_h2d, 0u);
    }
    if (v.pinned == num_moe) {
      EXPECT_EQ(s.bytes_h2d, 0u);
    }
  }
}

TEST(OffloadParityTest, EngineWithMinimumBudgetMatchesResident) {
  const nlohmann::json cases = testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  EngineOptions base;
  base.model_path = testing::TinyModelDir();
  base.backend = "cpu";
  base.num_threads = 1;
  base.max_context_tokens = 256;
  auto resident = Engine::Create(base);
  ASSERT_TRUE(resident.ok()) << resident.status();

  // The minimum: resident + KV cache + one slab, nothing pinned.
  EngineOptions small = base;
  small.offload.pinned_layers = 0;
  small.offload.eviction = "lru";
  small.gpu_memory_budget_bytes = 1;
  auto too_small = Engine::Create(small);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("too small"), std::string::npos)
      << too_small.status();
  auto config = ModelConfig::Load(base.model_path);
  auto ckpt = Checkpoint::Open(base.model_path);
  ASSERT_TRUE(config.ok() && ckpt.ok());
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  ASSERT_TRUE(sizes.ok());
  small.gpu_memory_budget_bytes = sizes->resident_bytes +
                                  (*model)->NewKvCache(base.max_context_tokens)->bytes() +
                                  sizes->expert_bytes;
  small.offload.prefetch = "history";
  small.offload.copy_bandwidth_bytes_per_s = 50e6;
  auto offload = Engine::Create(small);
  ASSERT_TRUE(offload.ok()) << offload.status();
  small.gpu_memory_budget_bytes -= 1;
  EXPECT_FALSE(Engine::Create(small).ok());

  for (const auto& c : cases) {
    GenerateRequest req;
    ChatMessage m;
    m.role = "user";
    ContentPart part;
    part.text = c.value("name", std::string("hello"));
    m.content.push_back(part);
    req.messages.push_back(m);
    req.sampling.max_new_tokens = 6;
    auto a = (*resident)->Generate(req, {});
    auto b = (*offload)->Generate(req, {});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->token_ids, b->token_ids);
    EXPECT_EQ(a->text, b->text);
    EXPECT_GT(b->offload.cache_queries, 0u);
    EXPECT_GT(b->offload.bytes_h2d, 0u);
    EXPECT_LE(b->offload.cache_hits, b->offload.cache_queries);
    // All resident: every lookup is a hit and nothing moves.
    EXPECT_EQ(a->offload.cache_hits, a->offload.cache_queries);
    EXPECT_EQ(a->offload.bytes_h2d, 0u);
    EXPECT_EQ(a->offload.cache_queries, b->offload.cache_queries);
  }
}

TEST(OffloadParityTest, HostExecutionMatchesResidentBitForBit) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::string prefix = Qwen3VlMoeModel::TextPrefix(*config);
  auto resident = ResidentExpertProvider::Create(**ckpt, config->text, prefix);
  ASSERT_TRUE(resident.ok()) << resident.status();
  ThreadPool pool(2);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sizes = MeasureModelSizes(**ckpt, config->text, prefix);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  const nlohmann::json cases = testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  std::vector<std::vector<std::vector<float>>> want;
  std::vector<std::vector<int>> want_tokens;
  for (const auto& c : cases) {
    want_tokens.emplace_back();
    want.push_back(testing::GreedyLogits(**model, resident->get(),
                                         c["input_ids"].get<std::vector<int>>(), kDecodeSteps,
                                         nullptr, &want_tokens.back()));
  }
  const int num_moe = static_cast<int>(sizes->moe_layers.size());
  const int e = config->text.num_experts;
  struct Variant {
    int pinned;
    int slabs;
    const char* miss_policy;
    int host_layers;
    bool packed = false;
  };
  // A slow copy engine (5 MB/s: milliseconds per expert of this model against
  // microseconds of host compute), so the cpu policy puts misses on the host.
  const std::vector<Variant> variants = {{0, 1, "cpu", 0},         {1, 3, "cpu", 1},
                                         {0, 2, "cpu", 0, true},   {1, 1, "fetch", num_moe - 1},
                                         {0, 5, "fetch", 2, true}, {1, 2, "cpu", 2}};
  for (const Variant& v : variants) {
    MemoryPlanOptions po;
    po.pinned_layers = v.pinned;
    po.budget_bytes = sizes->resident_bytes +
                      (static_cast<int64_t>(v.pinned) * e + v.slabs) * sizes->expert_bytes;
    auto plan = MakeMemoryPlan(*sizes, po);
    ASSERT_TRUE(plan.ok()) << plan.status();
    OffloadOptions oo;
    oo.miss_policy = v.miss_policy;
    oo.host_moe_layers = v.host_layers;
    oo.copy_bandwidth_bytes_per_s = 5e6;
    oo.prefetch = "history";
    oo.host_experts = v.packed ? "packed" : "mapped";
    auto offload = OffloadExpertProvider::Create(**resident, config->text, *plan, oo, nullptr);
    ASSERT_TRUE(offload.ok()) << offload.status();
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "pinned " << v.pinned << " slabs " << v.slabs << " "
                                        << v.miss_policy << " host layers " << v.host_layers
                                        << (v.packed ? " packed" : "") << " case " << i);
      std::vector<int> tokens;
      auto got = testing::GreedyLogits(**model, offload->get(),
                                       cases[i]["input_ids"].get<std::vector<int>>(), kDecodeSteps,
                                       nullptr, &tokens);
      EXPECT_EQ(tokens, want_tokens[i]);
      EXPECT_TRUE(testing::BitIdentical(got, want[i]));
    }
    (*offload)->WaitForTransfers();
    const OffloadStats s = (*offload)->TakeRequestStats();
    EXPECT_GT(s.experts_host_computed, 0u);
    EXPECT_EQ(s.bytes_not_copied, s.experts_host_computed * (*offload)->format().bytes);
    if (v.pinned + v.host_layers == num_moe) {
      EXPECT_EQ(s.bytes_h2d, 0u);  // every offloaded layer is on the host
      EXPECT_EQ(s.experts_host_computed, s.prefetch_needed);
    }
  }
}

TEST(OffloadParityTest, EngineWithHostExecutionMatchesResident) {
  const nlohmann::json cases = testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  EngineOptions base;
  base.model_path = testing::TinyModelDir();
  base.backend = "cpu";
  base.num_threads = 1;
  base.max_context_tokens = 256;
  auto resident = Engine::Create(base);
  ASSERT_TRUE(resident.ok()) << resident.status();
  auto config = ModelConfig::Load(base.model_path);
  auto ckpt = Checkpoint::Open(base.model_path);
  ASSERT_TRUE(config.ok() && ckpt.ok());
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  ASSERT_TRUE(sizes.ok());
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  EngineOptions host = base;
  host.offload.pinned_layers = 1;
  host.gpu_memory_budget_bytes = sizes->resident_bytes +
                                 (*model)->NewKvCache(base.max_context_tokens)->bytes() +
                                 (config->text.num_experts + 2) * sizes->expert_bytes;
  host.offload.copy_bandwidth_bytes_per_s = 5e6;
  host.offload.miss_policy = "cpu";
  host.offload.host_moe_layers = 1;
  auto offload = Engine::Create(host);
  ASSERT_TRUE(offload.ok()) << offload.status();
  // More host layers than layers outside the pinned prefix: a start-up error.
  host.offload.host_moe_layers = static_cast<int>(sizes->moe_layers.size());
  auto too_many = Engine::Create(host);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("host_moe_layers"), std::string::npos)
      << too_many.status();
  // Without a budget every expert is resident: host layers would do nothing.
  EngineOptions no_budget = base;
  ASSERT_LE(no_budget.gpu_memory_budget_bytes, 0);
  no_budget.offload.host_moe_layers = 1;
  auto ignored = Engine::Create(no_budget);
  ASSERT_FALSE(ignored.ok());
  EXPECT_EQ(ignored.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ignored.status().message().find("host_moe_layers=1 needs a GPU memory budget"),
            std::string::npos)
      << ignored.status();

  for (const auto& c : cases) {
    GenerateRequest req;
    ChatMessage m;
    m.role = "user";
    ContentPart part;
    part.text = c.value("name", std::string("hello"));
    m.content.push_back(part);
    req.messages.push_back(m);
    req.sampling.max_new_tokens = 6;
    auto a = (*resident)->Generate(req, {});
    auto b = (*offload)->Generate(req, {});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->token_ids, b->token_ids);
    EXPECT_EQ(a->text, b->text);
    EXPECT_GT(b->offload.experts_host_computed, 0u);
    EXPECT_GE(b->offload.bytes_not_copied, b->offload.experts_host_computed);
    EXPECT_EQ(a->offload.experts_host_computed, 0u);
  }
}

// Per-sequence preload through the Engine: at every budget from one slab to
// every expert cached, with each eviction policy, the greedy tokens are the
// resident engine's; preload copies something where the cache is partial.
TEST(OffloadParityTest, EngineWithPreloadMatchesResidentAtEveryBudget) {
  const nlohmann::json cases = testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  EngineOptions base;
  base.model_path = testing::TinyModelDir();
  base.backend = "cpu";
  base.num_threads = 1;
  base.max_context_tokens = 256;
  auto resident = Engine::Create(base);
  ASSERT_TRUE(resident.ok()) << resident.status();
  auto config = ModelConfig::Load(base.model_path);
  auto ckpt = Checkpoint::Open(base.model_path);
  ASSERT_TRUE(config.ok() && ckpt.ok());
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  ASSERT_TRUE(sizes.ok());
  const int64_t floor =
      sizes->resident_bytes + (*model)->NewKvCache(base.max_context_tokens)->bytes();
  const int all = static_cast<int>(sizes->moe_layers.size()) * config->text.num_experts;
  struct Variant {
    int slabs;
    const char* eviction;
    const char* prefetch;
    double share;
  };
  for (const Variant& v : {Variant{1, "lru", "none", 1.0}, Variant{5, "lfu", "history", 0.5},
                           Variant{12, "guarded", "history", 0.5}, Variant{24, "lru", "none", 1.0},
                           Variant{all, "lfu", "none", 1.0}}) {
    SCOPED_TRACE(::testing::Message() << v.slabs << " slabs, " << v.eviction << "/" << v.prefetch
                                      << ", share " << v.share);
    EngineOptions o = base;
    o.gpu_memory_budget_bytes = floor + v.slabs * sizes->expert_bytes;
    o.offload.pinned_layers = 0;
    o.offload.eviction = v.eviction;
    o.offload.prefetch = v.prefetch;
    o.offload.preload = "prefill-routing";
    o.offload.preload_share = v.share;
    auto engine = Engine::Create(o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    uint64_t preloaded = 0;
    for (const auto& c : cases) {
      GenerateRequest req;
      ChatMessage m;
      m.role = "user";
      ContentPart part;
      part.text = c.value("name", std::string("hello"));
      m.content.push_back(part);
      req.messages.push_back(m);
      req.sampling.max_new_tokens = 6;
      auto a = (*resident)->Generate(req, {});
      auto b = (*engine)->Generate(req, {});
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(a->token_ids, b->token_ids);
      EXPECT_EQ(a->text, b->text);
      EXPECT_LE(b->offload.preload_used, b->offload.preload_issued);
      preloaded += b->offload.preload_issued;
    }
    if (v.slabs < all) {
      EXPECT_GT(preloaded, 0u);
    }
  }
}

}  // namespace
}  // namespace vismoe
