// The CPU decoder against transformers' golden logits and greedy tokens
// (tests/fixtures/golden, made by tests/fixtures/make_fixtures.py; the trained
// benchmark model's tests/fixtures/vqa-eval/golden, made by
// tests/fixtures/vqa/record_answers.py in the same format).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/arch/mrope_positions.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/arch/qwen3_vl_vision.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors_file.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/runtime/sampler.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

struct Loaded {
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
  std::unique_ptr<ResidentExpertProvider> experts;
  std::unique_ptr<Qwen3VlMoeModel> model;
};

void Load(const std::string& dir, ThreadPool* pool, Loaded* out) {
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  out->config = *config;
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  out->checkpoint = std::move(*ckpt);
  auto experts = ResidentExpertProvider::Create(*out->checkpoint, out->config.text,
                                                Qwen3VlMoeModel::Experts(out->config));
  ASSERT_TRUE(experts.ok()) << experts.status();
  out->experts = std::move(*experts);
  auto model = Qwen3VlMoeModel::Create(out->config, *out->checkpoint, pool);
  ASSERT_TRUE(model.ok()) << model.status();
  out->model = std::move(*model);
}

// Logits agree when each row's max |diff| is within kRelTol of that row's
// golden logit range.
constexpr float kRelTol = 1e-4f;

void ExpectLogitsClose(const TensorView& ref, const std::vector<float>& got, int vocab) {
  std::vector<float> want(ref.numel());
  ToFloat(ref.dtype, ref.data, want.size(), want.data());
  ASSERT_EQ(got.size(), want.size());
  float worst_ratio = 0;
  for (size_t t = 0; t < want.size() / vocab; ++t) {
    const float* r = want.data() + t * vocab;
    const float* g = got.data() + t * vocab;
    const auto [mn, mx] = std::minmax_element(r, r + vocab);
    float worst = 0;
    for (int v = 0; v < vocab; ++v) worst = std::max(worst, std::abs(r[v] - g[v]));
    EXPECT_LE(worst, kRelTol * (*mx - *mn)) << "position " << t;
    worst_ratio = std::max(worst_ratio, worst / (*mx - *mn));
  }
  std::printf("[parity] max |logit diff| / logit range = %.3g (limit 1e-4)\n", worst_ratio);
}

// The greedy tokens against transformers' `want`, continuing from `logits`
// (last row = next token), KV-cached, every axis at position cache length +
// rope_delta. Each step is fed the golden token, so where every step's argmax
// is the golden one this is exactly the greedy run (and a divergence is
// reported at its step without derailing the rest). With `near_ties`, a step
// whose argmax differs still passes when the golden token's logit is within
// kRelTol of that step's logit range of the maximum: a near-tie that the
// logits' own tolerance may flip (trained models have them: the VQA model's
// read_375 path has a top1-top2 margin of ~0.002).
//
// LongRoPE (`prompt` given): a step about to decode with
// original_max_position_embeddings KV rows instead prefills every token so
// far into a fresh cache, as transformers' PhiMoE generate and the engine's
// scheduler (StepLimits::longrope_recompute_at) do.
void ExpectGreedyPath(const Loaded& m, KvCache* cache, std::vector<float> logits,
                      const std::vector<int>& want, int64_t rope_delta, bool near_ties,
                      const std::vector<int>& prompt = {}) {
  const int vocab = m.config.text.vocab_size;
  const auto& longrope = m.config.text.longrope;
  std::unique_ptr<KvCache> rebuilt;
  std::vector<int> got;
  for (size_t i = 0; i < want.size(); ++i) {
    if (i > 0 && longrope.has_value() && !prompt.empty() &&
        cache->length() == longrope->original_max_position_embeddings) {
      std::vector<int> all = prompt;
      all.insert(all.end(), want.begin(), want.begin() + static_cast<std::ptrdiff_t>(i));
      rebuilt = m.model->NewKvCache(static_cast<int64_t>(prompt.size() + want.size()));
      cache = rebuilt.get();
      DecoderInput recompute;
      recompute.tokens = all;
      absl::Status st = m.model->Forward(recompute, cache, m.experts.get(), &logits);
      ASSERT_TRUE(st.ok()) << st;
    } else if (i > 0) {
      DecoderInput step;
      step.tokens = absl::MakeConstSpan(&want[i - 1], 1);
      step.phase = Phase::kDecode;
      const int64_t pos = cache->length() + rope_delta;
      step.positions = {pos, pos, pos};
      absl::Status st = m.model->Forward(step, cache, m.experts.get(), &logits);
      ASSERT_TRUE(st.ok()) << st;
    }
    const float* last = logits.data() + logits.size() - vocab;
    got.push_back(Sampler::Argmax(absl::MakeConstSpan(last, vocab)));
    if (near_ties && got.back() != want[i]) {
      const auto [mn, mx] = std::minmax_element(last, last + vocab);
      const float gap = last[got.back()] - last[want[i]];
      if (gap <= kRelTol * (*mx - *mn)) {
        std::printf("[parity] step %zu: near-tie %d vs golden %d, gap %.3g\n", i, got.back(),
                    want[i], gap);
        got.back() = want[i];
      }
    }
  }
  EXPECT_EQ(got, want);
}

// For every case: prompt logits within kRelTol of the logit range, and 32
// greedy tokens (KV-cached decode, EOS not stopping) identical to
// transformers' (near-ties: ExpectGreedyPath).
void CheckCases(const std::string& model_dir, const std::string& cases_file,
                const std::string& logits_file, bool near_ties = false) {
  ThreadPool pool(2);
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(Load(model_dir, &pool, &m));
  std::ifstream in(cases_file);
  ASSERT_TRUE(in) << cases_file;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json cases = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(cases.is_array() && !cases.empty()) << cases_file;
  auto golden = SafetensorsFile::Open(logits_file);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const int vocab = m.config.text.vocab_size;

  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const std::vector<int> ids = c["input_ids"].get<std::vector<int>>();
    const std::vector<int> want = c["greedy_ids"].get<std::vector<int>>();
    auto ref = (*golden)->Get(name);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_EQ(ref->shape, (Shape{static_cast<int64_t>(ids.size()), vocab}));
    auto cache = m.model->NewKvCache(static_cast<int64_t>(ids.size() + want.size()));
    DecoderInput input;
    input.tokens = ids;
    input.all_logits = true;
    std::vector<float> logits;
    ASSERT_TRUE(m.model->Forward(input, cache.get(), m.experts.get(), &logits).ok());
    ExpectLogitsClose(*ref, logits, vocab);
    ExpectGreedyPath(m, cache.get(), logits, want, 0, near_ties, ids);
  }
}

TEST(Qwen3VlMoeParityTest, TextCasesMatchTransformers) {
  CheckCases(testing::TinyModelDir(), testing::FixturesDir() + "/golden/text_cases.json",
             testing::FixturesDir() + "/golden/text_logits.safetensors");
}

// Images: golden pixel values -> vision tower -> M-RoPE positions -> decoder.
void CheckMultimodalCases(const std::string& model_dir, const std::string& gold,
                          bool near_ties = false, std::string pixels_dir = "") {
  if (pixels_dir.empty()) pixels_dir = gold;
  const nlohmann::json cases = testing::ReadJsonFile(gold + "/mm_cases.json");
  ASSERT_TRUE(cases.is_array() && !cases.empty()) << gold << "/mm_cases.json";
  ThreadPool pool(2);
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(Load(model_dir, &pool, &m));
  auto vision = Qwen3VlVisionModel::Create(m.config, *m.checkpoint, &pool);
  ASSERT_TRUE(vision.ok()) << vision.status();
  auto pixels = SafetensorsFile::Open(pixels_dir + "/pixel_values.safetensors");
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  auto golden = SafetensorsFile::Open(gold + "/mm_logits.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const int vocab = m.config.text.vocab_size;

  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const std::vector<int> ids = c["input_ids"].get<std::vector<int>>();
    const std::vector<int> want = c["greedy_ids"].get<std::vector<int>>();
    std::vector<GridThw> grids;
    for (const auto& g : c["image_grid_thw"]) grids.push_back({g[0], g[1], g[2]});
    std::vector<float> patches;
    for (const auto& img : c["image_names"]) {
      auto pv = (*pixels)->Get(img.get<std::string>());
      ASSERT_TRUE(pv.ok()) << pv.status();
      const size_t old = patches.size();
      patches.resize(old + pv->numel());
      ToFloat(pv->dtype, pv->data, pv->numel(), patches.data() + old);
    }
    auto pos = ComputeMropePositions(ids, grids, m.config);
    ASSERT_TRUE(pos.ok()) << pos.status();
    std::vector<int64_t> want_pos;
    for (const auto& axis : c["position_ids"]) {
      for (const auto& p : axis) want_pos.push_back(p.get<int64_t>());
    }
    ASSERT_EQ(pos->positions, want_pos);
    ASSERT_EQ(pos->rope_delta, c["rope_delta"].get<int64_t>());
    auto vis = (*vision)->Forward(patches, grids);
    ASSERT_TRUE(vis.ok()) << vis.status();

    auto cache = m.model->NewKvCache(static_cast<int64_t>(ids.size() + want.size()));
    DecoderInput input;
    input.tokens = ids;
    input.positions = pos->positions;
    input.visual_embeds = vis->embeds.data();
    input.num_visual = vis->num_tokens;
    for (const auto& ds : vis->deepstack) input.deepstack.push_back(ds.data());
    input.all_logits = true;
    std::vector<float> logits;
    absl::Status st = m.model->Forward(input, cache.get(), m.experts.get(), &logits);
    ASSERT_TRUE(st.ok()) << st;
    auto ref = (*golden)->Get(name);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ExpectLogitsClose(*ref, logits, vocab);
    ExpectGreedyPath(m, cache.get(), logits, want, pos->rope_delta, near_ties);
  }
}

TEST(Qwen3VlMoeParityTest, MultimodalCasesMatchTransformers) {
  CheckMultimodalCases(testing::TinyModelDir(), testing::FixturesDir() + "/golden");
}

// The FP8 layout of Qwen3-VL-30B-A3B-Instruct-FP8 (attention and per-expert
// weights F8_E4M3 with 32 x 32 block scales): transformers in fp32 on the
// dequantised weights, the CPU kernels dequantising as they read.
TEST(Qwen3VlMoeParityTest, Fp8CheckpointMatchesTransformersOnItsDequantisedWeights) {
  const std::string dir = testing::FixturesDir() + "/tiny-qwen3-vl-moe-fp8";
  const std::string gold = testing::FixturesDir() + "/golden/fp8";
  CheckCases(dir, gold + "/text_cases.json", gold + "/text_logits.safetensors");
  CheckMultimodalCases(dir, gold, /*near_ties=*/false, testing::FixturesDir() + "/golden");
}

// The trained VQA benchmark models (tests/fixtures/vqa-qwen3-vl-moe and the
// single-run recipe's vqa-direct-qwen3-vl-moe) on their goldens: caption /
// position / read prompts with their eval pictures, and an arithmetic one;
// greedy near-ties allowed (ExpectGreedyPath).
struct VqaGoldens {
  const char* name;
  const char* model_dir;   // under tests/fixtures
  const char* golden_dir;  // under tests/fixtures/vqa-eval
};

void PrintTo(const VqaGoldens& g, std::ostream* os) { *os << g.model_dir; }

class VqaModelGoldenTest : public ::testing::TestWithParam<VqaGoldens> {
 protected:
  std::string Model() const { return testing::FixturesDir() + "/" + GetParam().model_dir; }
  std::string Gold() const { return testing::FixturesDir() + "/vqa-eval/" + GetParam().golden_dir; }
};

TEST_P(VqaModelGoldenTest, TextCasesMatchTransformers) {
  CheckCases(Model(), Gold() + "/text_cases.json", Gold() + "/text_logits.safetensors",
             /*near_ties=*/true);
}

TEST_P(VqaModelGoldenTest, MultimodalCasesMatchTransformers) {
  CheckMultimodalCases(Model(), Gold(), /*near_ties=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    TrainedModels, VqaModelGoldenTest,
    ::testing::Values(VqaGoldens{"Recorded", "vqa-qwen3-vl-moe", "golden"},
                      VqaGoldens{"Direct", "vqa-direct-qwen3-vl-moe", "direct/golden"}),
    [](const ::testing::TestParamInfo<VqaGoldens>& info) { return std::string(info.param.name); });

// The text-only Qwen3-MoE fixture in the FP8 layout with BF16 block scales.
TEST(Qwen3VlMoeParityTest, Fp8TextCheckpointWithBf16ScalesMatchesTransformers) {
  CheckCases(testing::FixturesDir() + "/tiny-qwen3-moe-fp8",
             testing::FixturesDir() + "/golden/fp8_text_cases.json",
             testing::FixturesDir() + "/golden/fp8_text_logits.safetensors");
}

TEST(Qwen3VlMoeParityTest, Qwen3MoeTextOnlyMatchesTransformers) {
  const std::string dir = testing::FixturesDir() + "/tiny-qwen3-moe";
  if (!std::filesystem::exists(dir + "/config.json")) {
    GTEST_SKIP() << "fixture " << dir << " not generated";
  }
  CheckCases(dir, testing::FixturesDir() + "/golden/qwen3_moe_cases.json",
             testing::FixturesDir() + "/golden/qwen3_moe_logits.safetensors");
}

// The other text families, written in the same decoder: OLMoE (q_norm /
// k_norm over the whole projection, top-k not renormalised; the second shape
// adds clip_qkv, clamping ~43% of layer-0 q values, GQA and norm_topk_prob)
// and Mixtral (no q/k norms, experts under block_sparse_moe as w1 / w3 / w2;
// the second shape has an 8-token sliding window, shorter than every prompt),
// and PhiMoE (LayerNorms with biases, attention and lm_head biases, the
// sparsemixer router; the second shape adds LongRoPE over an original
// context of 24, which the short case crosses while decoding, and an 8-token
// window).
TEST(Qwen3VlMoeParityTest, OtherTextFamiliesMatchTransformers) {
  for (const auto& [fixture, golden] :
       {std::pair{"tiny-olmoe", "olmoe"}, std::pair{"tiny-olmoe-clip", "olmoe_clip"},
        std::pair{"tiny-mixtral", "mixtral"}, std::pair{"tiny-mixtral-swa", "mixtral_swa"},
        std::pair{"tiny-phimoe", "phimoe"}, std::pair{"tiny-phimoe-longrope", "phimoe_longrope"}}) {
    SCOPED_TRACE(fixture);
    CheckCases(absl::StrCat(testing::FixturesDir(), "/", fixture),
               absl::StrCat(testing::FixturesDir(), "/golden/", golden, "_cases.json"),
               absl::StrCat(testing::FixturesDir(), "/golden/", golden, "_logits.safetensors"));
  }
}

// CheckCases on fixture tiny-<key, '_' as '-'> and its goldens <key>_*.
void CheckNamedFixtures(std::initializer_list<const char*> goldens) {
  for (const char* golden : goldens) {
    SCOPED_TRACE(golden);
    std::string fixture = absl::StrCat("tiny-", golden);
    std::replace(fixture.begin(), fixture.end(), '_', '-');
    CheckCases(absl::StrCat(testing::FixturesDir(), "/", fixture),
               absl::StrCat(testing::FixturesDir(), "/golden/", golden, "_cases.json"),
               absl::StrCat(testing::FixturesDir(), "/golden/", golden, "_logits.safetensors"));
  }
}

// DeepSeek-V2 and V3 (#33): multi-head latent attention over a cache of
// latents and rope keys, shared experts, a dense first layer and YaRN, with
// V2-Lite's shape (q_proj, greedy softmax routing), V2's (q_a / q_b with
// their norm, group-limited routing, attention_factor != 1) and V3's
// (sigmoid routing with its selection bias, interleaved RoPE), and V3 in its
// FP8 release's layout (every decoder linear F8_E4M3 with block scales, the
// latent attention's kv_b_proj sliced per head across scale blocks) against
// transformers on the dequantised weights.
TEST(Qwen3VlMoeParityTest, DeepseekFamiliesMatchTransformers) {
  CheckNamedFixtures(
      {"deepseek_v2_lite", "deepseek_v2", "deepseek_v3", "deepseek_v3_plain", "deepseek_v3_fp8"});
}

// GPT-OSS in its dequantized layout (#34): attention sinks, sliding layers
// alternating with full ones (the second shape's 8-token window shorter than
// every prompt; tied embeddings; YaRN truncated), the router's top-k of
// biased logits, experts with biases and the clamped SwiGLU on interleaved
// gate / up columns.
TEST(Qwen3VlMoeParityTest, GptOssMatchesTransformers) {
  CheckNamedFixtures({"gpt_oss", "gpt_oss_swa"});
}

// GPT-OSS with its experts in MXFP4 as published (blocks + e8m0 scales, a
// 16-token window that bites), against transformers' own dequantised
// reference (Mxfp4Config(dequantize=True)): the experts stay packed and are
// decoded inside the CPU kernels.
TEST(Qwen3VlMoeParityTest, GptOssMxfp4MatchesTransformersDequantised) {
  CheckNamedFixtures({"gpt_oss_mxfp4"});
}

// Multi-head latent attention caches each token's normed latent and rotated
// rope key in one plane: kv_lora_rank + qk_rope_head_dim floats per layer,
// not the heads' expanded keys and values.
TEST(Qwen3VlMoeParityTest, LatentAttentionCachesTheLatentOnly) {
  ThreadPool pool(2);
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(Load(testing::FixturesDir() + "/tiny-deepseek-v2-lite", &pool, &m));
  const TextConfig& c = m.config.text;
  ASSERT_TRUE(c.mla.has_value());
  const int64_t latent_row = c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
  const int64_t expanded_row =
      int64_t{c.num_attention_heads} * (c.mla->qk_head_dim() + c.mla->v_head_dim);
  ASSERT_LT(latent_row, expanded_row);
  auto cache = m.model->NewKvCache(64);
  EXPECT_EQ(cache->pool()->planes(), 1);
  EXPECT_EQ(cache->row_elems(), latent_row);
  EXPECT_EQ(cache->bytes(),
            64 * int64_t{c.num_hidden_layers} * latent_row * static_cast<int64_t>(sizeof(float)));
}

// LongRoPE scales a prefill's rows by its whole length (rope_length), so a
// recompute prefilled in pieces (the engine's prompt, then its generated
// tokens) equals one prefill of every token: bit for bit on the CPU backend.
// Without rope_length the prompt piece would take short_mscale.
TEST(Qwen3VlMoeParityTest, LongRopePiecesScaleByTheWholePrefill) {
  ThreadPool pool(2);
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(Load(testing::FixturesDir() + "/tiny-phimoe-longrope", &pool, &m));
  ASSERT_TRUE(m.config.text.longrope.has_value());
  const int orig = m.config.text.longrope->original_max_position_embeddings;
  std::vector<int> tokens(static_cast<size_t>(orig) + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>(100 + 37 * i % 1500);
  std::vector<float> whole, pieces;
  auto one = m.model->NewKvCache(64);
  DecoderInput all;
  all.tokens = tokens;
  ASSERT_TRUE(m.model->Forward(all, one.get(), m.experts.get(), &whole).ok());
  auto two = m.model->NewKvCache(64);
  const size_t split = 10;  // positions 0..9 alone would be short_mscale
  DecoderInput first, second;
  first.tokens = absl::MakeConstSpan(tokens).subspan(0, split);
  first.rope_length = static_cast<int64_t>(tokens.size());
  second.tokens = absl::MakeConstSpan(tokens).subspan(split);
  second.rope_length = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(m.model->Forward(first, two.get(), m.experts.get(), &pieces).ok());
  ASSERT_TRUE(m.model->Forward(second, two.get(), m.experts.get(), &pieces).ok());
  ASSERT_EQ(whole.size(), pieces.size());
  EXPECT_EQ(whole, pieces);
  // The scale does bite: the first piece at its own length differs.
  auto three = m.model->NewKvCache(64);
  first.rope_length = 0;
  std::vector<float> short_first;
  ASSERT_TRUE(m.model->Forward(first, three.get(), m.experts.get(), &short_first).ok());
  ASSERT_TRUE(m.model->Forward(second, three.get(), m.experts.get(), &short_first).ok());
  EXPECT_NE(whole, short_first);
}

// Records what the model reports per MoE layer.
class RecordingObserver : public RouterObserver {
 public:
  void OnRouting(Phase phase, int layer, const float* hidden,
                 const RouterResult& routing) override {
    layers.push_back(layer);
    phases.push_back(phase);
    EXPECT_NE(hidden, nullptr);
    last = routing;
  }
  std::vector<int> layers;
  std::vector<Phase> phases;
  RouterResult last;
};

TEST(Qwen3VlMoeModelTest, RouterObserverSeesEveryMoeLayer) {
  ThreadPool pool(2);
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(Load(testing::TinyModelDir(), &pool, &m));
  const std::vector<int> ids = {1, 2, 3, 4, 5};
  auto cache = m.model->NewKvCache(8);
  RecordingObserver obs;
  DecoderInput in;
  in.tokens = ids;
  in.observer = &obs;
  std::vector<float> logits;
  ASSERT_TRUE(m.model->Forward(in, cache.get(), m.experts.get(), &logits).ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>(m.config.text.vocab_size));  // last row only
  EXPECT_EQ(obs.layers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(obs.phases[0], Phase::kPrefill);
  const RouterResult& r = obs.last;
  EXPECT_EQ(r.n, 5);
  EXPECT_EQ(r.top_k, m.config.text.num_experts_per_tok);
  EXPECT_EQ(r.logits.size(), static_cast<size_t>(5 * m.config.text.num_experts));
  for (int64_t t = 0; t < r.n; ++t) {
    float sum = 0;
    for (int j = 0; j < r.top_k; ++j) {
      const int e = r.experts[t * r.top_k + j];
      EXPECT_TRUE(e >= 0 && e < m.config.text.num_experts);
      sum += r.weights[t * r.top_k + j];
    }
    EXPECT_NEAR(sum, 1.0f, 1e-5);  // norm_topk_prob
  }
  EXPECT_EQ(cache->length(), 5);

  // Errors: bad token id, visual count mismatch, cancellation, a full cache.
  const std::vector<int> bad = {m.config.text.vocab_size};
  in.tokens = bad;
  EXPECT_EQ(m.model->Forward(in, cache.get(), m.experts.get(), &logits).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> vis(m.config.text.hidden_size);
  const std::vector<int> pads = {m.config.image_token_id, m.config.image_token_id};
  in.tokens = pads;
  in.visual_embeds = vis.data();
  in.num_visual = 1;
  EXPECT_EQ(m.model->Forward(in, cache.get(), m.experts.get(), &logits).code(),
            absl::StatusCode::kInvalidArgument);
  in.visual_embeds = nullptr;
  in.num_visual = 0;
  const std::vector<int> two = {1, 2};  // fits: 5 + 2 <= 8
  in.tokens = two;
  in.is_cancelled = [] { return true; };
  EXPECT_EQ(m.model->Forward(in, cache.get(), m.experts.get(), &logits).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(cache->length(), 5);
  in.is_cancelled = nullptr;
  in.tokens = ids;  // 5 + 5 > 8
  EXPECT_EQ(m.model->Forward(in, cache.get(), m.experts.get(), &logits).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace vismoe
