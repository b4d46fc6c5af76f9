// ResidentExpertProvider on small hand-written checkpoints in both layouts.
#include "engine/offload/resident_expert_provider.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/safetensors_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// One MoE layer (layer 1; layer 0 is dense), 3 experts, H = 4, I = 2.
TextConfig SmallConfig() {
  TextConfig c;
  c.hidden_size = 4;
  c.num_hidden_layers = 2;
  c.moe_intermediate_size = 2;
  c.num_experts = 3;
  c.num_experts_per_tok = 2;
  c.mlp_only_layers = {0};
  return c;
}

class ResidentExpertProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vismoe_rep_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < 3 * 4 * 4; ++i) data_.push_back(static_cast<float>(i));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::vector<std::pair<std::string, TensorView>>& t) {
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), t).ok());
  }
  TensorView View(Shape s) { return TensorView{data_.data(), DType::kF32, std::move(s)}; }

  std::filesystem::path dir_;
  std::vector<float> data_;
};

TEST_F(ResidentExpertProviderTest, FusedLayoutSlicesExperts) {
  Write({{"model.layers.1.mlp.experts.gate_up_proj", View({3, 4, 4})},
         {"model.layers.1.mlp.experts.down_proj", View({3, 2, 4})}});
  auto ckpt = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto p = ResidentExpertProvider::Create(**ckpt, SmallConfig(), "model.");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->layout(), ExpertWeights::Layout::kFusedTransposed);
  const std::vector<int> want = {2, 0};
  auto order = (*p)->BeginLayer(Phase::kPrefill, 1, want);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(*order, want);
  EXPECT_TRUE((*p)->Ready(1, 0));  // resident: Acquire never waits
  auto w = (*p)->Acquire(1, 2);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->gate_up.shape, (Shape{4, 4}));
  EXPECT_EQ(static_cast<const float*>(w->gate_up.data)[0], 32.0f);  // expert 2 starts at 2*16
  EXPECT_EQ(w->down.shape, (Shape{2, 4}));
  EXPECT_EQ(static_cast<const float*>(w->down.data)[0], 16.0f);  // 2*8
  (*p)->Release(1, 2);
  (*p)->EndLayer(1);
  EXPECT_EQ((*p)->queries(), 1u);
  EXPECT_FALSE((*p)->BeginLayer(Phase::kDecode, 0, want).ok());  // dense layer
  EXPECT_FALSE((*p)->Acquire(1, 3).ok());
}

TEST_F(ResidentExpertProviderTest, SeparateLayoutAndShapeErrors) {
  std::vector<std::pair<std::string, TensorView>> t;
  for (int e = 0; e < 3; ++e) {
    const std::string b = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    t.push_back({b + "gate_proj.weight", View({2, 4})});
    t.push_back({b + "up_proj.weight", View({2, 4})});
    t.push_back({b + "down_proj.weight", View({4, 2})});
  }
  Write(t);
  auto ckpt = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto p = ResidentExpertProvider::Create(**ckpt, SmallConfig(), "model.");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->layout(), ExpertWeights::Layout::kSeparate);
  auto w = (*p)->Acquire(1, 1);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->layout, ExpertWeights::Layout::kSeparate);
  EXPECT_EQ(w->down.shape, (Shape{4, 2}));

  TextConfig wrong = SmallConfig();
  wrong.moe_intermediate_size = 3;
  auto bad = ResidentExpertProvider::Create(**ckpt, wrong, "model.");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("experts.0.gate_proj.weight"));
  wrong = SmallConfig();
  wrong.num_experts = 4;
  bad = ResidentExpertProvider::Create(**ckpt, wrong, "model.");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("experts.3."));
}

}  // namespace
}  // namespace vismoe
