// Label gpu: the vision tower over the CUDA ops against the tower over the CPU
// ops (the reference) on the tiny
// Qwen3-VL-MoE fixture, for one image and for several images of different
// grids (one with two frames): merger embeddings, every DeepStack feature and
// the per-token saliency agree within a bf16-scaled tolerance, the output
// layout is the same, each frame's saliency sums to 1 / merge^2 and two runs
// are bit-identical. Bad inputs (wrong patch count, a grid not divisible by
// the merge size, more patches than max_patches) are InvalidArgument and leave
// the model working. Through the public Engine API, a cuda-backend engine
// (which builds this tower) answers an image request. Skips without a device.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(CudaVisionOpsTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_vision.h"
#include "engine/backends/cuda/cuda_vision_ops.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/api/engine.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"
#include "tests/testing/image_request.h"
#include "tests/testing/paths.h"

namespace vismoe::cuda {
namespace {

// bf16 activations and patch inputs through the tiny tower's four blocks stay
// within a few percent of each output's range (the CUDA decoder test's bound).
constexpr float kRelTol = 0.04f;
// Above the tower's 1024-row patch-upload chunk, so the largest input takes
// two chunks through the staging buffer.
constexpr int64_t kMaxPatches = 1280;

// max |got - want| <= kRelTol * max |want|, and no NaN.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what;
  const float tol = kRelTol * testing::MaxAbs(want);
  float worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float d = std::fabs(got[i] - want[i]);
    if (!(d <= worst)) {  // NaN propagates as the worst
      worst = d;
      at = i;
    }
  }
  std::printf("%s: max |diff| %.3g (tolerance %.3g)\n", what.c_str(), worst, tol);
  EXPECT_LE(worst, tol) << what << ": worst at " << at << ": got " << got[at] << " want "
                        << want[at];
}

std::vector<float> RandomPatches(int64_t n, int64_t patch_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);  // normalised pixels
  std::vector<float> p(static_cast<size_t>(n * patch_dim));
  for (float& v : p) v = dist(rng);
  return p;
}

int64_t NumPatches(const std::vector<GridThw>& grids) {
  int64_t n = 0;
  for (const GridThw& g : grids) n += g.num_patches();
  return n;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaVisionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VISMOE_SKIP_WITHOUT_GPU();
    const std::string dir = vismoe::testing::TinyModelDir();
    auto config = ModelConfig::Load(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    ASSERT_TRUE(config_.has_vision);
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = *std::move(ckpt);
    auto cpu = Qwen3VlVisionModel::Create(config_, *ckpt_, &pool_);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    CudaVisionOps::Options o;
    o.max_patches = kMaxPatches;
    auto ops = CudaVisionOps::Create(config_, *ckpt_, o);
    ASSERT_TRUE(ops.ok()) << ops.status();
    EXPECT_EQ((*ops)->max_patches(), kMaxPatches);
    EXPECT_GT((*ops)->device_scratch_bytes(), 0);
    auto gpu = Qwen3VlVisionModel::Create(config_, *std::move(ops));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    EXPECT_STREQ(gpu_->backend(), "cuda");
  }

  // Runs both towers on random patches for `grids` and compares them.
  void CompareTowers(const std::vector<GridThw>& grids, uint32_t seed) {
    ASSERT_EQ(gpu_->patch_dim(), cpu_->patch_dim());
    const std::vector<float> patches = RandomPatches(NumPatches(grids), cpu_->patch_dim(), seed);
    auto want = cpu_->Forward(patches, grids);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = gpu_->Forward(patches, grids);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->num_tokens, want->num_tokens);
    EXPECT_EQ(got->out_hidden, want->out_hidden);
    EXPECT_EQ(got->tokens_per_image, want->tokens_per_image);
    ExpectNear(got->embeds, want->embeds, "embeds");
    ASSERT_EQ(got->deepstack.size(), want->deepstack.size());
    ASSERT_EQ(got->deepstack.size(), config_.vision.deepstack_visual_indexes.size());
    for (size_t k = 0; k < want->deepstack.size(); ++k) {
      ExpectNear(got->deepstack[k], want->deepstack[k], "deepstack " + std::to_string(k));
    }
    ExpectNear(got->saliency, want->saliency, "saliency");

    // Each frame's patches receive all of its attention: its tokens sum to 1 / merge^2.
    const int merge = config_.vision.spatial_merge_size;
    int64_t token = 0;
    for (const GridThw& g : grids) {
      const int64_t per_frame = (g.h / merge) * (g.w / merge);
      for (int64_t t = 0; t < g.t; ++t) {
        double sum = 0;
        for (int64_t j = 0; j < per_frame; ++j) sum += got->saliency[token + j];
        EXPECT_NEAR(sum, 1.0 / (merge * merge), 1e-4) << "frame at token " << token;
        token += per_frame;
      }
    }
    EXPECT_EQ(token, got->num_tokens);

    // Deterministic: the same input gives bit-identical outputs.
    auto again = gpu_->Forward(patches, grids);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(BitEqual(again->embeds, got->embeds));
    for (size_t k = 0; k < got->deepstack.size(); ++k) {
      EXPECT_TRUE(BitEqual(again->deepstack[k], got->deepstack[k])) << "deepstack " << k;
    }
    EXPECT_TRUE(BitEqual(again->saliency, got->saliency));
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Qwen3VlVisionModel> cpu_;
  std::unique_ptr<Qwen3VlVisionModel> gpu_;
};

TEST_F(CudaVisionTest, OneImageMatchesCpu) { CompareTowers({GridThw{1, 6, 8}}, 1); }

TEST_F(CudaVisionTest, SeveralImagesOfDifferentGridsMatchCpu) {
  CompareTowers({GridThw{1, 4, 6}, GridThw{1, 8, 4}}, 2);
  // A two-frame grid between single frames: attention stays within each frame.
  CompareTowers({GridThw{1, 2, 2}, GridThw{2, 4, 4}, GridThw{1, 10, 6}}, 3);
}

TEST_F(CudaVisionTest, LargestInputFitsTheScratch) {
  // 1280 patches = max_patches, one frame (the saliency scratch's largest
  // case), uploaded in two patch chunks (1024 + 256 rows).
  CompareTowers({GridThw{1, 32, 40}}, 4);
}

TEST_F(CudaVisionTest, BadInputIsInvalidArgumentAndTheModelStillWorks) {
  const std::vector<GridThw> grids = {GridThw{1, 4, 6}};
  const int64_t pd = gpu_->patch_dim();
  const std::vector<float> patches = RandomPatches(NumPatches(grids), pd, 5);
  auto before = gpu_->Forward(patches, grids);
  ASSERT_TRUE(before.ok()) << before.status();

  // One patch value short.
  const std::vector<float> short_patches(patches.begin(), patches.end() - 1);
  EXPECT_EQ(gpu_->Forward(short_patches, grids).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A grid that is not a multiple of the merge size (same patch count as 4 x 6).
  const std::vector<GridThw> odd = {GridThw{1, 3, 8}};
  EXPECT_EQ(gpu_->Forward(patches, odd).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu_->Forward(patches, odd).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<GridThw> zero = {GridThw{0, 4, 6}};
  EXPECT_EQ(gpu_->Forward(patches, zero).status().code(), absl::StatusCode::kInvalidArgument);
  // More patches than the scratch was sized for.
  const std::vector<GridThw> big = {GridThw{1, 32, 42}};
  const std::vector<float> big_patches = RandomPatches(NumPatches(big), pd, 6);
  auto too_big = gpu_->Forward(big_patches, big);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("max_patches"), std::string::npos) << too_big.status();

  auto after = gpu_->Forward(patches, grids);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(BitEqual(after->embeds, before->embeds));
  EXPECT_TRUE(BitEqual(after->saliency, before->saliency));
  ASSERT_EQ(after->deepstack.size(), before->deepstack.size());
  for (size_t k = 0; k < after->deepstack.size(); ++k) {
    EXPECT_TRUE(BitEqual(after->deepstack[k], before->deepstack[k])) << "deepstack " << k;
  }
}

TEST_F(CudaVisionTest, NoImagesGivesAnEmptyOutput) {
  auto got = gpu_->Forward({}, {});
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = cpu_->Forward({}, {});
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(got->num_tokens, 0);
  EXPECT_EQ(got->embeds.size(), want->embeds.size());
  EXPECT_EQ(got->deepstack.size(), want->deepstack.size());
  EXPECT_EQ(got->saliency.size(), want->saliency.size());
}

TEST(CudaVisionCreateTest, BadOptionsAndMissingVisionAreInvalidArgument) {
  VISMOE_SKIP_WITHOUT_GPU();
  const std::string dir = vismoe::testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  CudaVisionOps::Options o;
  o.max_patches = 0;
  EXPECT_EQ(CudaVisionOps::Create(*config, **ckpt, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.max_patches = 64;
  ModelConfig no_vision = *config;
  no_vision.has_vision = false;
  EXPECT_EQ(CudaVisionOps::Create(no_vision, **ckpt, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A checkpoint without the tower's tensors: the error names the first one.
  auto text_only = Checkpoint::Open(vismoe::testing::FixturesDir() + "/tiny-qwen3-moe");
  ASSERT_TRUE(text_only.ok()) << text_only.status();
  auto missing = CudaVisionOps::Create(*config, **text_only, o);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model.visual."), std::string::npos)
      << missing.status();
}

// Through the public Engine API: a cuda-backend engine builds the CUDA tower,
// reserves its device memory in the plan and answers an image request.
TEST(CudaVisionEngineTest, ImageRequestRunsOnTheCudaTower) {
  VISMOE_SKIP_WITHOUT_GPU();
  EngineOptions o;
  o.model_path = vismoe::testing::TinyModelDir();
  o.backend = "cuda";
  o.max_context_tokens = 512;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().backend, "cuda");
  auto res = (*engine)->Generate(vismoe::testing::PatternImageRequest(4), {});
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_GT(res->usage.visual_tokens_before, 0);
  EXPECT_EQ(res->token_ids.size(), 4u);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
