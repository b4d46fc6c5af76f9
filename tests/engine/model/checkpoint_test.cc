#include "engine/model/checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/safetensors_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory per test under the gtest temp dir.
std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir =
      ::testing::TempDir() + "checkpoint_test/" + info->test_suite_name() + "." + info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// Tensor data shared by the fixtures below; views point into these.
const float kA[6] = {1, 2, 3, 4, 5, 6};
const float kB[4] = {-1, -2, -3, -4};
const float kC[2] = {9, 10};

void WriteShard(const std::string& path, const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, TensorView>> tensors;
  for (const std::string& n : names) {
    if (n == "a") tensors.push_back({n, {kA, DType::kF32, {2, 3}}});
    if (n == "b") tensors.push_back({n, {kB, DType::kF32, {4}}});
    if (n == "c") tensors.push_back({n, {kC, DType::kF32, {1, 2}}});
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
}

// Two shards: a in shard 1, b and c in shard 2; the index lists all three.
std::string MakeShardedDir() {
  const std::string dir = TestDir();
  WriteShard(dir + "/model-00001-of-00002.safetensors", {"a"});
  WriteShard(dir + "/model-00002-of-00002.safetensors", {"b", "c"});
  WriteText(dir + "/model.safetensors.index.json",
            R"({"metadata": {"total_size": 48}, "weight_map": {
                  "a": "model-00001-of-00002.safetensors",
                  "b": "model-00002-of-00002.safetensors",
                  "c": "model-00002-of-00002.safetensors"}})");
  return dir;
}

void ExpectOpenFails(const std::string& dir, absl::StatusCode code, const std::string& substring) {
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok()) << dir << " opened but should fail with: " << substring;
  EXPECT_EQ(ckpt.status().code(), code) << ckpt.status();
  EXPECT_THAT(std::string(ckpt.status().message()), HasSubstr(substring));
}

TEST(CheckpointTest, SingleFile) {
  const std::string dir = TestDir();
  WriteShard(dir + "/model.safetensors", {"a", "b"});
  auto ckpt = Checkpoint::Open(dir + "/");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  EXPECT_EQ(c.dir(), dir);
  EXPECT_EQ(c.num_shards(), 1u);
  EXPECT_THAT(c.Names(), ElementsAre("a", "b"));
  EXPECT_TRUE(c.Has("a"));
  EXPECT_FALSE(c.Has("c"));

  auto a = c.Get("a", {2, 3});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(static_cast<const float*>(a->data)[5], 6.0f);

  const absl::Status missing = c.Get("c").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "tensor 'c' not found in " + dir);

  const absl::Status wrong = c.Get("a", {3, 2}).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.message()),
              HasSubstr("tensor 'a' has shape [2, 3], expected [3, 2]"));
}

TEST(CheckpointTest, ShardedViaIndex) {
  const std::string dir = MakeShardedDir();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  EXPECT_EQ(c.num_shards(), 2u);
  EXPECT_THAT(c.Names(), ElementsAre("a", "b", "c"));
  auto b = c.Get("b", {4});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(static_cast<const float*>(b->data)[3], -4.0f);
  auto cv = c.Get("c");
  ASSERT_TRUE(cv.ok());
  EXPECT_EQ(cv->shape, (Shape{1, 2}));
  EXPECT_EQ(static_cast<const float*>(cv->data)[0], 9.0f);
  EXPECT_EQ(c.Get("a", {6}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, SingleFileWinsOverIndex) {
  const std::string dir = MakeShardedDir();
  WriteShard(dir + "/model.safetensors", {"c"});
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_THAT((*ckpt)->Names(), ElementsAre("c"));
}

TEST(CheckpointTest, TensorsMissingFromWeightMapAreIgnored) {
  const std::string dir = TestDir();
  WriteShard(dir + "/s1.safetensors", {"a", "b"});
  WriteText(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_THAT((*ckpt)->Names(), ElementsAre("a"));
  EXPECT_FALSE((*ckpt)->Has("b"));
}

TEST(CheckpointTest, UnsupportedDtypeIsAnErrorOnlyWhenRead) {
  const std::string dir = TestDir();
  // The writer only emits F32/F16/BF16, so build the I64 tensor by hand.
  const std::string header = R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((padded.size() >> (8 * i)) & 0xff);
  WriteText(dir + "/model.safetensors", bytes + padded + std::string(16, '\0'));
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->Has("ids"));
  const absl::Status s = (*ckpt)->Get("ids").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensor 'ids' has dtype I64"));
}

// MXFP4 experts: U8 blocks and scales, read only together as one MXFP4 view
// [..., out, in]; shapes, dtypes and NaN scales are refused by name.
TEST(CheckpointTest, Mxfp4WeightsAsBlocksAndScales) {
  const std::string dir = TestDir();
  std::vector<uint8_t> blocks(2 * 3 * 2 * 16), scales(2 * 3 * 2, 127), nan_scales(12, 127);
  for (size_t k = 0; k < blocks.size(); ++k) blocks[k] = static_cast<uint8_t>(k);
  nan_scales[7] = 0xff;
  const float f[2] = {1, 2};
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"w_blocks", {blocks.data(), DType::kU8, {2, 3, 2, 16}}},
                                {"w_scales", {scales.data(), DType::kU8, {2, 3, 2}}},
                                {"e_blocks", {blocks.data(), DType::kU8, {2, 3, 2, 16}}},
                                {"e_scales", {scales.data(), DType::kE8M0, {2, 3, 2}}},
                                {"nan_blocks", {blocks.data(), DType::kU8, {2, 3, 2, 16}}},
                                {"nan_scales", {nan_scales.data(), DType::kU8, {2, 3, 2}}},
                                {"f_blocks", {f, DType::kF32, {2}}},
                                {"f_scales", {scales.data(), DType::kU8, {2, 3, 2}}}})
                  .ok());
  EXPECT_FALSE(
      WriteSafetensors(dir + "/x.safetensors", {{"m", {blocks.data(), DType::kMxFp4, {2, 32}}}})
          .ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  for (const char* name : {"w", "e"}) {
    SCOPED_TRACE(name);
    auto w = c.GetMxfp4(name, {2, 3, 64});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->dtype, DType::kMxFp4);
    EXPECT_EQ(w->shape, (Shape{2, 3, 64}));
    EXPECT_EQ(w->nbytes(), blocks.size());
    EXPECT_EQ(w->scale, (BlockScale{w->scale.data, DType::kE8M0, 1, 32}));
    EXPECT_EQ(w->scale_nbytes(), scales.size());
    const TensorView row = w->Row(1);  // expert 1: [3, 64]
    EXPECT_EQ(static_cast<const uint8_t*>(row.data)[0], 96);
    EXPECT_EQ(row.scale_numel(), 6);
  }
  EXPECT_THAT(std::string(c.Get("w_blocks").status().message()),
              HasSubstr("tensor 'w_blocks' is U8"));
  EXPECT_THAT(std::string(c.GetMxfp4("w", {2, 3, 96}).status().message()),
              HasSubstr("tensor 'w_blocks' has shape [2, 3, 2, 16], expected [2, 3, 3, 16]"));
  EXPECT_THAT(std::string(c.GetMxfp4("w", {2, 3, 48}).status().message()),
              HasSubstr("multiple of 32"));
  EXPECT_THAT(std::string(c.GetMxfp4("nan", {2, 3, 64}).status().message()),
              HasSubstr("'nan_scales'"));
  EXPECT_THAT(std::string(c.GetMxfp4("f", {2, 3, 64}).status().message()),
              HasSubstr("tensor 'f_blocks' has dtype F32, expected U8"));
  EXPECT_EQ(c.GetMxfp4("missing", {2, 3, 64}).status().code(), absl::StatusCode::kNotFound);
}

// FP8 weights: Get refuses them; GetLinear attaches their block scales where
// the config gives a block size, and names the tensor at fault otherwise.
TEST(CheckpointTest, Fp8WeightsOnlyAsLinearWeightsWithTheirScales) {
  const std::string dir = TestDir();
  const uint8_t q[6] = {0x38, 0x40, 0xb8, 0x00, 0x01, 0x7e};  // [2, 3]
  const float scale[1] = {0.5f};                              // one 128 x 128 block
  const float bad_scale[1] = {NAN};
  const uint16_t bf16_scale[2] = {0x3f80, 0x3f80};  // [2, 1] of 1 x 128 blocks
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"w.weight", {q, DType::kF8E4M3, {2, 3}}},
                                {"w.weight_scale_inv", {scale, DType::kF32, {1, 1}}},
                                {"v.weight", {q, DType::kF8E4M3, {2, 3}}},
                                {"v.weight_scale_inv", {bf16_scale, DType::kBF16, {2, 1}}},
                                {"nan.weight", {q, DType::kF8E4M3, {2, 3}}},
                                {"nan.weight_scale_inv", {bad_scale, DType::kF32, {1, 1}}},
                                {"bare.weight", {q, DType::kF8E4M3, {2, 3}}},
                                {"a", {kA, DType::kF32, {2, 3}}}})
                  .ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  EXPECT_THAT(std::string(c.Get("w.weight").status().message()),
              HasSubstr("tensor 'w.weight' is F8_E4M3"));
  EXPECT_THAT(std::string(c.GetLinear("w.weight", {2, 3}, std::nullopt).status().message()),
              HasSubstr("tensor 'w.weight' is F8_E4M3"));
  const QuantBlock block{128, 128};
  auto w = c.GetLinear("w.weight", {2, 3}, block);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  EXPECT_EQ(w->scale, (BlockScale{w->scale.data, DType::kF32, 128, 128}));
  EXPECT_EQ(*static_cast<const float*>(w->scale.data), 0.5f);
  EXPECT_EQ(w->scale_numel(), 1);
  auto v = c.GetLinear("v.weight", {2, 3}, QuantBlock{1, 128});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->scale.dtype, DType::kBF16);
  EXPECT_EQ(v->scale_numel(), 2);
  EXPECT_THAT(std::string(c.GetLinear("v.weight", {2, 3}, block).status().message()),
              HasSubstr("tensor 'v.weight_scale_inv' has shape [2, 1], expected [1, 1]"));
  EXPECT_THAT(std::string(c.GetLinear("w.weight", {3, 2}, block).status().message()),
              HasSubstr("tensor 'w.weight' has shape [2, 3], expected [3, 2]"));
  EXPECT_THAT(std::string(c.GetLinear("bare.weight", {2, 3}, block).status().message()),
              HasSubstr("'bare.weight' is F8_E4M3 but bare.weight_scale_inv is missing"));
  EXPECT_THAT(std::string(c.GetLinear("nan.weight", {2, 3}, block).status().message()),
              HasSubstr("nan.weight_scale_inv holds a NaN or an infinity"));
  // Other dtypes read as Get does, scales or not.
  auto a = c.GetLinear("a", {2, 3}, block);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->scale.data, nullptr);
  EXPECT_EQ(*c.StoredBytes("w.weight"), 6u);
  EXPECT_EQ(*c.StoredBytes("a"), 24u);
}

TEST(CheckpointTest, EmptyOrMissingDirectory) {
  const std::string dir = TestDir();
  ExpectOpenFails(dir, absl::StatusCode::kNotFound,
                  "no model.safetensors or model.safetensors.index.json in " + dir);
  ExpectOpenFails(dir + "/absent", absl::StatusCode::kNotFound, "no model.safetensors");
}

TEST(CheckpointTest, IndexNamingMissingShard) {
  const std::string dir = MakeShardedDir();
  std::filesystem::remove(dir + "/model-00002-of-00002.safetensors");
  ExpectOpenFails(dir, absl::StatusCode::kNotFound,
                  "shard 'model-00002-of-00002.safetensors' (for tensor 'b') does not exist");
}

TEST(CheckpointTest, ShardLacksTensorTheIndexAssignsToIt) {
  const std::string dir = MakeShardedDir();
  WriteText(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                               "b": "model-00001-of-00002.safetensors"}})");
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument,
                  "puts tensor 'b' in shard 'model-00001-of-00002.safetensors', which does not "
                  "contain it");
}

TEST(CheckpointTest, ShardNamesCannotEscapeTheDirectory) {
  const std::string dir = MakeShardedDir();
  // The escaping target exists, so only the name check can stop it.
  WriteShard(dir + "/../outside.safetensors", {"a"});
  for (const std::string shard :
       {"../outside.safetensors", "sub/model.safetensors", "..", "", "a\\\\b.safetensors"}) {
    WriteText(dir + "/model.safetensors.index.json",
              R"({"weight_map": {"a": ")" + shard + R"("}})");
    ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument, "is not a plain file name");
  }
}

TEST(CheckpointTest, BadIndexJson) {
  const std::string dir = MakeShardedDir();
  const std::string index = dir + "/model.safetensors.index.json";
  WriteText(index, R"({"weight_map": {"a": )");
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument, "index.json: not valid JSON");
  WriteText(index, "[]");
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument, "not a JSON object");
  WriteText(index, R"({"metadata": {}})");
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument, "missing or non-object \"weight_map\"");
  WriteText(index, R"({"metadata": 3, "weight_map": {}})");
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument, "\"metadata\" is not a JSON object");
  WriteText(index, R"({"weight_map": {"a": 1}})");
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument, "weight_map entry for 'a' is not");
}

TEST(CheckpointTest, DuplicateTensorAcrossShards) {
  const std::string dir = MakeShardedDir();
  WriteShard(dir + "/model-00002-of-00002.safetensors", {"a", "b", "c"});
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument,
                  "tensor 'a' appears in both shard 'model-00001-of-00002.safetensors' and shard "
                  "'model-00002-of-00002.safetensors'");
}

TEST(CheckpointTest, CorruptShardNamesTheShard) {
  const std::string dir = MakeShardedDir();
  const std::string shard = dir + "/model-00002-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 4);
  ExpectOpenFails(dir, absl::StatusCode::kInvalidArgument, shard + ": tensor ");
}

// The tiny checkpoint made by tests/fixtures/make_fixtures.py (committed): every
// language-model tensor the config implies is present with the published layout,
// and there are no others.
TEST(CheckpointTest, TinyQwen3VlMoeFixture) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  EXPECT_EQ(c.num_shards(), 2u) << "fixture is documented as sharded";
  for (const std::string& name : c.Names()) {
    auto view = c.Get(name);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->dtype, DType::kBF16) << name;
  }

  const TextConfig& t = config->text;
  const int64_t h = t.hidden_size, d = t.head_dim;
  const int64_t q = t.num_attention_heads * d, kv = t.num_key_value_heads * d;
  std::map<std::string, Shape> expected = {
      {"model.language_model.embed_tokens.weight", {t.vocab_size, h}},
      {"model.language_model.norm.weight", {h}},
  };
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    const std::string p = "model.language_model.layers." + std::to_string(l) + ".";
    expected[p + "input_layernorm.weight"] = {h};
    expected[p + "post_attention_layernorm.weight"] = {h};
    expected[p + "self_attn.q_proj.weight"] = {q, h};
    expected[p + "self_attn.k_proj.weight"] = {kv, h};
    expected[p + "self_attn.v_proj.weight"] = {kv, h};
    expected[p + "self_attn.o_proj.weight"] = {h, q};
    expected[p + "self_attn.q_norm.weight"] = {d};
    expected[p + "self_attn.k_norm.weight"] = {d};
    ASSERT_TRUE(t.IsMoeLayer(l)) << "the fixture has no dense layers";
    const int64_t e = t.num_experts, i = t.moe_intermediate_size;
    expected[p + "mlp.gate.weight"] = {e, h};
    expected[p + "mlp.experts.gate_up_proj"] = {e, h, 2 * i};
    expected[p + "mlp.experts.down_proj"] = {e, i, h};
  }
  for (const auto& [name, shape] : expected) {
    auto view = c.Get(name, shape);
    EXPECT_TRUE(view.ok()) << view.status();
  }
  for (const std::string& name : c.Names()) {
    if (name.rfind("model.language_model.", 0) == 0) {
      EXPECT_TRUE(expected.count(name)) << "unexpected tensor " << name;
    }
  }
  EXPECT_TRUE(c.Has("model.visual.patch_embed.proj.weight"));
}

}  // namespace
}  // namespace vismoe
