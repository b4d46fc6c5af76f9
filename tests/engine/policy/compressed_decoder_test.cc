// Token compression inside the decoder (per-layer KV lengths, kept positions)
// and through the Engine (usage counts, determinism, validation).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/api/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/image_request.h"
#include "tests/testing/paths.h"
#include "tests/testing/tiny_decoder.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

class CompressedDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::LoadTinyDecoder(&pool_, &config_, &ckpt_, &model_, &experts_));
  }

  ThreadPool pool_{1};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<ResidentExpertProvider> experts_;
  std::unique_ptr<Qwen3VlMoeModel> model_;
};

// Compressing before layer 0 is the same as never feeding the dropped tokens:
// the logits of the prompt and of a decode step after it must match a run on
// the kept tokens alone, at their original positions.
TEST_F(CompressedDecoderTest, DroppingBeforeLayerZeroEqualsShorterPrompt) {
  const std::vector<int> tokens = {11, 57, 300, 901, 44, 1200, 7, 64, 512, 99};
  const std::vector<int64_t> kept = {0, 2, 3, 6, 8, 9};
  auto cache = model_->NewKvCache(64);
  DecoderInput in;
  in.tokens = tokens;
  in.compress_before_layer = 0;
  in.select_kept_rows = [&]() -> absl::StatusOr<std::vector<int64_t>> { return kept; };
  std::vector<float> got;
  ASSERT_TRUE(model_->Forward(in, cache.get(), experts_.get(), &got).ok());
  EXPECT_EQ(cache->length(), 10);
  for (int l = 0; l < config_.text.num_hidden_layers; ++l) EXPECT_EQ(cache->layer_length(l), 6);

  std::vector<int> short_tokens;
  std::vector<int64_t> pos(3 * kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    short_tokens.push_back(tokens[kept[i]]);
    for (int a = 0; a < 3; ++a) pos[a * kept.size() + i] = kept[i];
  }
  auto ref_cache = model_->NewKvCache(64);
  DecoderInput ref;
  ref.tokens = short_tokens;
  ref.positions = pos;
  std::vector<float> want;
  ASSERT_TRUE(model_->Forward(ref, ref_cache.get(), experts_.get(), &want).ok());
  EXPECT_EQ(got, want);

  const int next = 321;
  DecoderInput d;
  d.tokens = absl::MakeConstSpan(&next, 1);
  d.phase = Phase::kDecode;
  d.positions = {10, 10, 10};
  DecoderInput dr = d;
  ASSERT_TRUE(model_->Forward(d, cache.get(), experts_.get(), &got).ok());
  ASSERT_TRUE(model_->Forward(dr, ref_cache.get(), experts_.get(), &want).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(cache->length(), 11);
  EXPECT_EQ(cache->layer_length(3), 7);
}

// Keeping every row after layer 2 takes the compression path but must give
// bit-identical logits to the plain path; dropping rows there leaves layers
// 0..1 with every token and layers 2..3 with the kept ones.
TEST_F(CompressedDecoderTest, PerLayerKvLengths) {
  const std::vector<int> tokens = {11, 57, 300, 901, 44, 1200, 7, 64};
  auto plain_cache = model_->NewKvCache(32);
  DecoderInput plain;
  plain.tokens = tokens;
  std::vector<float> want, got;
  ASSERT_TRUE(model_->Forward(plain, plain_cache.get(), experts_.get(), &want).ok());

  auto cache = model_->NewKvCache(32);
  DecoderInput all = plain;
  all.compress_before_layer = 2;
  all.select_kept_rows = []() -> absl::StatusOr<std::vector<int64_t>> {
    return std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7};
  };
  ASSERT_TRUE(model_->Forward(all, cache.get(), experts_.get(), &got).ok());
  EXPECT_EQ(got, want);

  cache->Clear();
  DecoderInput some = plain;
  some.compress_before_layer = 2;
  some.select_kept_rows = []() -> absl::StatusOr<std::vector<int64_t>> {
    return std::vector<int64_t>{0, 3, 7};
  };
  ASSERT_TRUE(model_->Forward(some, cache.get(), experts_.get(), &got).ok());
  EXPECT_EQ(cache->length(), 8);
  EXPECT_EQ(cache->layer_length(0), 8);
  EXPECT_EQ(cache->layer_length(1), 8);
  EXPECT_EQ(cache->layer_length(2), 3);
  EXPECT_EQ(cache->layer_length(3), 3);
  EXPECT_NE(got, want);

  DecoderInput bad = plain;
  bad.compress_before_layer = 1;
  bad.select_kept_rows = []() -> absl::StatusOr<std::vector<int64_t>> {
    return std::vector<int64_t>{3, 2};
  };
  cache->Clear();
  EXPECT_EQ(model_->Forward(bad, cache.get(), experts_.get(), &got).code(),
            absl::StatusCode::kInvalidArgument);
}

GenerateRequest ImageRequest() { return testing::PatternImageRequest(6); }

class CompressedEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.model_path = testing::TinyModelDir();
    o.backend = "cpu";  // compared with transformers' fp32 goldens
    o.num_threads = 1;
    o.max_context_tokens = 512;
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(CompressedEngineTest, EveryKindKeepsBudgetAndIsDeterministic) {
  GenerateRequest base = ImageRequest();
  auto exact = engine_->Generate(base, {});
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->usage.visual_tokens_after, 64);
  for (const char* kind : {"random", "saliency", "affinity"}) {
    GenerateRequest r = base;
    r.policy.token_compressor = kind;
    r.policy.keep_ratio = 0.5f;
    auto a = engine_->Generate(r, {});
    auto b = engine_->Generate(r, {});
    ASSERT_TRUE(a.ok()) << kind << ": " << a.status();
    ASSERT_TRUE(b.ok()) << kind << ": " << b.status();
    EXPECT_EQ(a->usage.visual_tokens_before, 64) << kind;
    EXPECT_EQ(a->usage.visual_tokens_after, 32) << kind;
    EXPECT_EQ(a->usage.prompt_tokens, exact->usage.prompt_tokens) << kind;
    EXPECT_EQ(a->token_ids, b->token_ids) << kind;
    EXPECT_FALSE(a->token_ids.empty()) << kind;
  }
  // beta = 1 keeps everything: the compression path reproduces the exact one.
  GenerateRequest full = base;
  full.policy.token_compressor = "affinity";
  full.policy.keep_ratio = 1.0f;
  auto f = engine_->Generate(full, {});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->usage.visual_tokens_after, 64);
  EXPECT_EQ(f->token_ids, exact->token_ids);
}

TEST_F(CompressedEngineTest, UnknownCompressorIsInvalid) {
  GenerateRequest r = ImageRequest();
  r.policy.token_compressor = "zip";
  auto res = engine_->Generate(r, {});
  EXPECT_EQ(res.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(res.status().message()), HasSubstr("zip"));

  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.compression.kind = "nope";
  EXPECT_EQ(Engine::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vismoe
