// Parity of the CPU vision tower with transformers' Qwen3VLMoeVisionModel on
// the tiny checkpoint: merger embeddings and DeepStack features from the
// golden pixel values must match golden/vision.safetensors.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/arch/qwen3_vl_vision.h"
#include "engine/model/safetensors_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

std::string GoldenDir() {
  const char* env = std::getenv("VISMOE_GOLDEN_DIR");  // to check regenerated goldens
  return env != nullptr ? env : testing::FixturesDir() + "/golden";
}

std::vector<float> Widen(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ToFloat(t.dtype, t.data, v.size(), v.data());
  return v;
}

// max |a - b| <= 1e-4 * (range of b).
void ExpectClose(const std::vector<float>& got, size_t offset, const TensorView& want_view,
                 const std::string& what) {
  const std::vector<float> want = Widen(want_view);
  ASSERT_LE(offset + want.size(), got.size()) << what;
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  const double range = std::max(1e-6, static_cast<double>(*hi - *lo));
  double max_diff = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[offset + i]) - want[i]));
  }
  std::printf("%s: max |diff| %.3g (range %.3g)\n", what.c_str(), max_diff, range);
  EXPECT_LE(max_diff, 1e-4 * range) << what << ": max |diff| " << max_diff << " range " << range;
}

class VisionParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = ModelConfig::Load(testing::TinyModelDir());
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto ckpt = Checkpoint::Open(testing::TinyModelDir());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = std::move(*ckpt);
    auto model = Qwen3VlVisionModel::Create(config_, *ckpt_, &pool_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    std::ifstream in(GoldenDir() + "/images.json");
    ASSERT_TRUE(in) << "missing " << GoldenDir() << "/images.json";
    std::stringstream ss;
    ss << in.rdbuf();
    cases_ = nlohmann::json::parse(ss.str(), nullptr, false);
    ASSERT_TRUE(cases_.is_array() && !cases_.empty());
    auto px = SafetensorsFile::Open(GoldenDir() + "/pixel_values.safetensors");
    ASSERT_TRUE(px.ok()) << px.status();
    pixels_ = std::move(*px);
    auto vis = SafetensorsFile::Open(GoldenDir() + "/vision.safetensors");
    ASSERT_TRUE(vis.ok()) << vis.status();
    vision_ = std::move(*vis);
  }

  GridThw Grid(const nlohmann::json& c) const {
    const auto& g = c["grid_thw"];
    return GridThw{g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()};
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Qwen3VlVisionModel> model_;
  nlohmann::json cases_;
  std::unique_ptr<SafetensorsFile> pixels_;
  std::unique_ptr<SafetensorsFile> vision_;
};

TEST_F(VisionParityTest, EachImageMatchesGolden) {
  for (const auto& c : cases_) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    auto px = pixels_->Get(name);
    ASSERT_TRUE(px.ok()) << px.status();
    const GridThw grid = Grid(c);
    auto out = model_->Forward(Widen(*px), {grid});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->num_tokens, grid.num_merged(2));
    auto embeds = vision_->Get(name + ".embeds");
    ASSERT_TRUE(embeds.ok()) << embeds.status();
    ASSERT_EQ(embeds->shape, (Shape{out->num_tokens, out->out_hidden}));
    ExpectClose(out->embeds, 0, *embeds, name + ".embeds");
    ASSERT_EQ(out->deepstack.size(), config_.vision.deepstack_visual_indexes.size());
    for (size_t k = 0; k < out->deepstack.size(); ++k) {
      auto ds = vision_->Get(name + ".deepstack." + std::to_string(k));
      ASSERT_TRUE(ds.ok()) << ds.status();
      ExpectClose(out->deepstack[k], 0, *ds, name + ".deepstack." + std::to_string(k));
    }
    // Saliency: a distribution over the frame's patches, averaged per token.
    ASSERT_EQ(out->saliency.size(), static_cast<size_t>(out->num_tokens));
    double sum = 0.0;
    for (float s : out->saliency) {
      EXPECT_GE(s, 0.0f);
      sum += s;
    }
    EXPECT_NEAR(sum, 0.25, 1e-4);
  }
}

TEST_F(VisionParityTest, SeveralImagesInOneCallAttendSeparately) {
  ASSERT_GE(cases_.size(), 2u);
  std::vector<float> patches;
  std::vector<GridThw> grids;
  for (size_t i = 0; i < 2; ++i) {
    auto px = pixels_->Get(cases_[i]["name"].get<std::string>());
    ASSERT_TRUE(px.ok());
    const std::vector<float> v = Widen(*px);
    patches.insert(patches.end(), v.begin(), v.end());
    grids.push_back(Grid(cases_[i]));
  }
  auto out = model_->Forward(patches, grids);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->tokens_per_image.size(), 2u);
  size_t offset = 0;
  for (size_t i = 0; i < 2; ++i) {
    const std::string name = cases_[i]["name"].get<std::string>();
    auto embeds = vision_->Get(name + ".embeds");
    ASSERT_TRUE(embeds.ok());
    ExpectClose(out->embeds, offset, *embeds, name + ".embeds (batched)");
    auto ds = vision_->Get(name + ".deepstack.0");
    ASSERT_TRUE(ds.ok());
    ExpectClose(out->deepstack[0], offset, *ds, name + ".deepstack.0 (batched)");
    offset += static_cast<size_t>(out->tokens_per_image[i] * out->out_hidden);
  }
}

TEST_F(VisionParityTest, RejectsMismatchedInputs) {
  const GridThw grid{1, 4, 4};
  std::vector<float> patches(static_cast<size_t>(16 * model_->patch_dim() - 1));
  EXPECT_THAT(model_->Forward(patches, {grid}).status().message(),
              ::testing::HasSubstr("patch values"));
  patches.resize(static_cast<size_t>(15 * model_->patch_dim()));
  EXPECT_EQ(model_->Forward(patches, {GridThw{1, 3, 5}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(VisionParityTest, CreateNamesAMismatchedTensor) {
  ModelConfig bad = config_;
  bad.vision.intermediate_size += 1;
  auto model = Qwen3VlVisionModel::Create(bad, *ckpt_, nullptr);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), ::testing::HasSubstr("blocks.0.mlp.linear_fc1.weight"));
  ModelConfig more = config_;
  more.vision.deepstack_visual_indexes.push_back(0);
  EXPECT_THAT(Qwen3VlVisionModel::Create(more, *ckpt_, nullptr).status().message(),
              ::testing::HasSubstr("deepstack_merger_list.3"));
}

}  // namespace
}  // namespace vismoe
