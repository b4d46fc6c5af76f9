// MemoryPlan arithmetic, Eq. 10 and its start-up errors.
#include "engine/offload/memory_plan.h"

#include "engine/model/arch_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 4 MoE layers (decoder layers 1..4), 8 experts of 100 bytes: S_layer = 800.
ModelSizes Sizes() {
  ModelSizes s;
  s.resident_bytes = 5000;
  s.expert_bytes = 100;
  s.num_experts = 8;
  s.moe_layers = {1, 2, 3, 4};
  return s;
}

TEST(MemoryPlanTest, ForcedPrefixFillsTheRestWithSlabs) {
  MemoryPlanOptions o;
  o.budget_bytes = 5000 + 300 + 200 + 800 + 1050;  // resident, activations, kv, 1 layer, 10.5 slabs
  o.activation_bytes = 300;
  o.kv_cache_bytes = 200;
  o.pinned_layers = 1;
  auto p = MakeMemoryPlan(Sizes(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pinned_layers, 1);
  EXPECT_THAT(p->pinned_layer_ids, ElementsAre(1));
  EXPECT_THAT(p->offloaded_layer_ids, ElementsAre(2, 3, 4));
  EXPECT_EQ(p->pinned_prefix_bytes, 800);
  EXPECT_EQ(p->num_slabs, 10);
  EXPECT_EQ(p->slab_cache_bytes, 1000);
  EXPECT_EQ(p->total_bytes(), 5000 + 300 + 200 + 800 + 1000);
  EXPECT_LE(p->total_bytes(), o.budget_bytes);
}

TEST(MemoryPlanTest, SlabsAreCappedAtTheOffloadedExperts) {
  MemoryPlanOptions o;
  o.budget_bytes = 1 << 20;
  o.pinned_layers = 2;
  auto p = MakeMemoryPlan(Sizes(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_slabs, 16);
}

TEST(MemoryPlanTest, AutoPinsEverythingWhenItFits) {
  MemoryPlanOptions o;
  o.budget_bytes = 5000 + 3200;
  auto p = MakeMemoryPlan(Sizes(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pinned_layers, 4);
  EXPECT_EQ(p->num_slabs, 0);
  EXPECT_TRUE(p->offloaded_layer_ids.empty());
}

TEST(MemoryPlanTest, AutoUsesEq10WithTheProfile) {
  MemoryPlanOptions o;
  // M_avail = 2500; C_safe = 3 slabs = 300 -> L_max = floor(2200 / 800) = 2.
  o.budget_bytes = 5000 + 2500;
  o.min_cache_slabs = 3;
  o.profile.l_semantic = 0;
  o.profile.cost = {9.0, 4.0, 5.0, 1.0};  // L = 3 is cheapest but not valid
  auto p = MakeMemoryPlan(Sizes(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pinned_layers, 1);
  EXPECT_EQ(p->num_slabs, 17);  // (2500 - 800) / 100
  // Without costs: the most compact valid prefix, L_semantic.
  o.profile.cost.clear();
  o.profile.l_semantic = 2;
  p = MakeMemoryPlan(Sizes(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pinned_layers, 2);
  // L_semantic beyond the valid interval: the largest valid depth.
  o.profile.l_semantic = 4;
  p = MakeMemoryPlan(Sizes(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pinned_layers, 2);
}

TEST(MemoryPlanTest, Eq10Helpers) {
  EXPECT_EQ(MaxPinnedLayers(2500, 300, 800, 4), 2);
  EXPECT_EQ(MaxPinnedLayers(250, 300, 800, 4), -1);
  EXPECT_EQ(MaxPinnedLayers(100000, 300, 800, 4), 4);
  PinnedPrefixProfile prof{1, {0.5, 3.0, 2.0, 2.0}};
  EXPECT_EQ(ChoosePinnedLayers(prof, 3), 2);  // ties go to the smaller L; L=0 < L_semantic
  EXPECT_EQ(ChoosePinnedLayers(prof, 1), 1);
}

TEST(MemoryPlanTest, TooSmallBudgetNamesTheNumbers) {
  MemoryPlanOptions o;
  o.budget_bytes = 5099;  // resident 5000 + one 100-byte slab = 5100
  o.pinned_layers = 0;
  auto p = MakeMemoryPlan(Sizes(), o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("5099 bytes"));
  EXPECT_THAT(p.status().message(), HasSubstr("resident 5000 bytes"));
  EXPECT_THAT(p.status().message(), HasSubstr("at least 5100 bytes"));
  o.budget_bytes = 5100;
  p = MakeMemoryPlan(Sizes(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_slabs, 1);
  // Auto with too little for even one slab.
  o.pinned_layers = -1;
  o.budget_bytes = 5050;
  EXPECT_FALSE(MakeMemoryPlan(Sizes(), o).ok());
}

TEST(MemoryPlanTest, RejectsBadOptions) {
  MemoryPlanOptions o;
  o.budget_bytes = 1 << 20;
  o.pinned_layers = 5;
  EXPECT_THAT(MakeMemoryPlan(Sizes(), o).status().message(), HasSubstr("got 5"));
  o.pinned_layers = -1;
  o.budget_bytes = 0;
  EXPECT_FALSE(MakeMemoryPlan(Sizes(), o).ok());
}

TEST(MemoryPlanTest, MeasuresTheTinyCheckpoint) {
  auto config = ModelConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(testing::TinyModelDir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto s = MeasureModelSizes(**ckpt, config->text, "model.language_model.");
  ASSERT_TRUE(s.ok()) << s.status();
  const TextConfig& t = config->text;
  // bf16 gate_up [H, 2I] + down [I, H].
  EXPECT_EQ(s->expert_bytes, 3LL * t.hidden_size * t.moe_intermediate_size * 2);
  EXPECT_EQ(static_cast<int>(s->moe_layers.size()), t.num_hidden_layers);
  EXPECT_EQ(s->num_experts, t.num_experts);
  EXPECT_GT(s->resident_bytes, 0);
}

// A slab holds each tensor of an expert on a 64-byte boundary (ExpertFormat),
// so the plan counts per-expert FP8 weights and their scales that way.
TEST(MemoryPlanTest, MeasuresExpertsAsTheyArePacked) {
  const std::string dir = testing::FixturesDir() + "/tiny-qwen3-vl-moe-fp8";
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto s = MeasureModelSizes(**ckpt, config->text, "model.language_model.");
  ASSERT_TRUE(s.ok()) << s.status();
  const TextConfig& t = config->text;
  // gate, up [I, H] and down [H, I] in e4m3, each with 32x32-block F32 scales
  // (32 bytes here) padded to 64.
  const int64_t matrix = int64_t{t.hidden_size} * t.moe_intermediate_size;
  ASSERT_EQ(matrix % 64, 0);
  EXPECT_EQ(s->expert_bytes, 3 * (matrix + 64));
}

// GPT-OSS's MXFP4 experts: the published blocks and e8m0 scales, 4.25 bits per
// weight (a quarter of bf16's bytes plus 1/64 for the scales). The expert
// biases stay resident.
TEST(MemoryPlanTest, MeasuresMxfp4ExpertsAtFourAndAQuarterBits) {
  const std::string dir = testing::FixturesDir() + "/tiny-gpt-oss-mxfp4";
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->text.mxfp4.has_value());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto spec = ArchSpec::For(*config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto s = MeasureModelSizes(**ckpt, config->text, spec->experts);
  ASSERT_TRUE(s.ok()) << s.status();
  const TextConfig& t = config->text;
  const int64_t weights = 3LL * t.hidden_size * t.moe_intermediate_size;  // gate_up + down
  ASSERT_EQ(weights * 17 % (32 * 64), 0);         // every part a multiple of 64 bytes here
  EXPECT_EQ(s->expert_bytes, weights * 17 / 32);  // 4.25 bits = 17/32 bytes
}

}  // namespace
}  // namespace vismoe
