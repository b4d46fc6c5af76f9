// Engine on the tiny Qwen3-VL-MoE fixture: greedy output equals transformers'
// greedy tokens, and the stop / cancel / validation paths behave.
#include "engine/api/engine.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/kv_cache.h"
#include "engine/core/dtype.h"
#include "engine/model/safetensors_file.h"
#include "engine/model/safetensors_writer.h"
#include "engine/runtime/stop_matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/golden_cases.h"
#include "tests/testing/image_request.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// A golden text case as a request.
struct Case {
  GenerateRequest request;
  std::vector<int> greedy;
  int prompt_len = 0;
};

// An empty case (and a test failure) when the fixture is missing or malformed.
Case LoadCase(const std::string& name) {
  Case c;
  const std::string path = testing::FixturesDir() + "/golden/text_cases.json";
  const nlohmann::json cases = testing::ReadJsonFile(path);
  if (!cases.is_array()) {
    ADD_FAILURE() << path << " is missing or not a JSON list";
    return c;
  }
  for (const auto& j : cases) {
    if (!j.is_object() || j.value("name", "") != name) continue;
    for (const auto& m : j["messages"]) {
      ChatMessage msg;
      msg.role = m["role"].get<std::string>();
      ContentPart part;
      part.text = m["content"].get<std::string>();
      msg.content.push_back(part);
      c.request.messages.push_back(msg);
    }
    c.greedy = j["greedy_ids"].get<std::vector<int>>();
    c.prompt_len = static_cast<int>(j["input_ids"].size());
  }
  if (c.greedy.empty()) ADD_FAILURE() << "no case '" << name << "' in " << path;
  return c;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions o;
    o.model_path = testing::TinyModelDir();
    o.backend = "cpu";  // compared with transformers' fp32 goldens
    o.num_threads = 2;
    o.max_context_tokens = 256;
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = e->release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  // Runs a request, collecting deltas.
  static absl::StatusOr<GenerateResult> Run(const GenerateRequest& r, std::string* streamed,
                                            std::vector<int>* streamed_ids = nullptr) {
    GenerateCallbacks cb;
    cb.on_delta = [&](const TokenDelta& d) {
      *streamed += d.text;
      if (streamed_ids)
        streamed_ids->insert(streamed_ids->end(), d.token_ids.begin(), d.token_ids.end());
      return true;
    };
    return engine_->Generate(r, cb);
  }

  static Engine* engine_;
};
Engine* EngineTest::engine_ = nullptr;

TEST_F(EngineTest, InfoDescribesModel) {
  const ModelInfo& i = engine_->info();
  EXPECT_EQ(i.model_type, "qwen3_vl_moe");
  EXPECT_EQ(i.backend, "cpu");
  EXPECT_EQ(i.num_layers, 4);
  EXPECT_EQ(i.num_experts, 16);
  EXPECT_EQ(i.experts_per_token, 4);
  EXPECT_TRUE(i.has_vision);
}

TEST_F(EngineTest, GreedyMatchesTransformersAndStopsOnLength) {
  Case c = LoadCase("short");
  ASSERT_FALSE(c.greedy.empty());
  auto n = engine_->CountPromptTokens(c.request);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, c.prompt_len);
  c.request.sampling.max_new_tokens = 20;
  std::string streamed;
  std::vector<int> streamed_ids;
  auto r = Run(c.request, &streamed, &streamed_ids);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish_reason, FinishReason::kLength);
  EXPECT_EQ(r->token_ids, std::vector<int>(c.greedy.begin(), c.greedy.begin() + 20));
  EXPECT_EQ(streamed_ids, r->token_ids);
  EXPECT_EQ(streamed, r->text);
  EXPECT_FALSE(r->text.empty());
  EXPECT_EQ(r->usage.prompt_tokens, c.prompt_len);
  EXPECT_EQ(r->usage.completion_tokens, 20);
  // 4 MoE layers; prefill routes to at least top_k experts, each decode step too.
  EXPECT_GE(r->offload.cache_queries, 4u * 4u * 20u);
  EXPECT_EQ(r->offload.cache_hits, r->offload.cache_queries);
  EXPECT_EQ(r->offload.bytes_h2d, 0u);
  EXPECT_GT(r->timings.total_seconds, 0);
  EXPECT_LE(r->timings.ttft_seconds, r->timings.total_seconds);
}

TEST_F(EngineTest, StopsOnEos) {
  // Transformers' greedy continuation of this case reaches <|endoftext|> (2000),
  // one of generation_config.json's eos ids.
  Case c = LoadCase("cjk_emoji");
  auto eos = std::find(c.greedy.begin(), c.greedy.end(), 2000);
  ASSERT_NE(eos, c.greedy.end());
  c.request.sampling.max_new_tokens = 32;
  std::string streamed;
  auto r = Run(c.request, &streamed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish_reason, FinishReason::kEos);
  EXPECT_EQ(r->token_ids, std::vector<int>(c.greedy.begin(), eos));
  EXPECT_EQ(streamed, r->text);
}

TEST_F(EngineTest, StopStringCutsTextAndStreamsNothingPastIt) {
  Case c = LoadCase("short");
  c.request.sampling.max_new_tokens = 24;
  std::string full;
  auto base = Run(c.request, &full);
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_GE(full.size(), 8u);
  // A stop string from the middle of the greedy text.
  const std::string stop = full.substr(full.size() / 2, 3);
  const size_t cut = full.find(stop);
  c.request.sampling.stop = {"never-appears", stop};
  std::string streamed;
  auto r = Run(c.request, &streamed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish_reason, FinishReason::kStopString);
  EXPECT_EQ(r->text, full.substr(0, cut));
  EXPECT_EQ(streamed, r->text);
  EXPECT_LT(r->token_ids.size(), base->token_ids.size());
}

TEST_F(EngineTest, CancelFromDeltaCallbackAndBeforeFirstToken) {
  Case c = LoadCase("short");
  c.request.sampling.max_new_tokens = 20;
  int deltas = 0;
  std::string streamed;
  GenerateCallbacks cb;
  cb.on_delta = [&](const TokenDelta& d) {
    streamed += d.text;
    return ++deltas < 2;
  };
  auto r = engine_->Generate(c.request, cb);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(deltas, 2);
  EXPECT_LT(r->token_ids.size(), 20u);
  EXPECT_EQ(streamed, r->text);

  GenerateCallbacks cancelled;
  cancelled.is_cancelled = [] { return true; };
  r = engine_->Generate(c.request, cancelled);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(r->token_ids.empty());
}

TEST_F(EngineTest, SamplingIsDeterministicPerSeed) {
  Case c = LoadCase("long");
  c.request.sampling.max_new_tokens = 16;
  c.request.sampling.temperature = 1.0f;
  c.request.sampling.top_p = 0.95f;
  c.request.sampling.seed = 42;
  std::string s1, s2, s3;
  auto a = Run(c.request, &s1);
  auto b = Run(c.request, &s2);
  c.request.sampling.seed = 7;
  auto d = Run(c.request, &s3);
  ASSERT_TRUE(a.ok() && b.ok() && d.ok());
  EXPECT_EQ(a->token_ids, b->token_ids);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(a->token_ids, d->token_ids);
  // The step draws the tokens (DrawTokens); a caller that wants the
  // prefill's logits gets every step's logits instead and the host draws:
  // the same tokens, one random number per token either way.
  c.request.sampling.seed = 42;
  GenerateCallbacks with_logits;
  int prefills = 0;
  with_logits.on_prefill_logits = [&](absl::Span<const float>) { ++prefills; };
  auto host = engine_->Generate(c.request, with_logits);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(prefills, 1);
  EXPECT_EQ(host->token_ids, a->token_ids);
}

TEST_F(EngineTest, InvalidRequestsAreRejected) {
  Case c = LoadCase("short");
  auto expect_invalid = [&](const GenerateRequest& r, const std::string& what) {
    auto res = engine_->Generate(r, {});
    ASSERT_FALSE(res.ok()) << what;
    EXPECT_EQ(res.status().code(), absl::StatusCode::kInvalidArgument) << res.status();
    EXPECT_THAT(std::string(res.status().message()), HasSubstr(what));
  };
  GenerateRequest empty;
  expect_invalid(empty, "no messages");
  GenerateRequest r = c.request;
  r.sampling.max_new_tokens = 0;
  expect_invalid(r, "max_new_tokens");
  r = c.request;
  r.sampling.temperature = -1;
  expect_invalid(r, "temperature");
  r = c.request;
  r.sampling.top_p = 0;
  expect_invalid(r, "top_p");
  r = c.request;
  r.sampling.top_k = -3;
  expect_invalid(r, "top_k");
  r = c.request;
  r.sampling.stop = {""};
  expect_invalid(r, "stop");
  r = c.request;
  ContentPart img;
  img.kind = ContentPart::Kind::kImage;
  img.image_index = 0;
  r.messages[0].content.push_back(img);
  expect_invalid(r, "image 0");
  r = c.request;
  r.messages[0].content[0].text = std::string(2000, 'a') + " " + std::string(2000, 'b');
  Case long_case = LoadCase("long");
  for (int i = 0; i < 3; ++i) r.messages.push_back(long_case.request.messages[0]);
  expect_invalid(r, "too long");
}

TEST_F(EngineTest, ImageRequestExpandsPadsAndGenerates) {
  // 64x64 is below min_pixels (65536), so smart_resize scales it to 256x256:
  // a 16x16 patch grid, 8x8 = 64 merged visual tokens.
  GenerateRequest r;
  r.images.resize(1);
  RgbImage& img = r.images[0];
  img.width = img.height = 64;
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) {
      img.pixels.push_back(static_cast<uint8_t>(4 * x));
      img.pixels.push_back(static_cast<uint8_t>(4 * y));
      img.pixels.push_back(static_cast<uint8_t>(x ^ y));
    }
  }
  ChatMessage m;
  m.role = "user";
  ContentPart image;
  image.kind = ContentPart::Kind::kImage;
  image.image_index = 0;
  ContentPart text;
  text.text = "Describe this image.";
  m.content = {image, text};
  r.messages = {m};
  GenerateRequest text_only = r;
  text_only.messages[0].content = {text};
  text_only.images.clear();
  auto with_image = engine_->CountPromptTokens(r);
  auto without = engine_->CountPromptTokens(text_only);
  ASSERT_TRUE(with_image.ok()) << with_image.status();
  ASSERT_TRUE(without.ok()) << without.status();
  // + vision_start, 64 pads, vision_end.
  EXPECT_EQ(*with_image, *without + 66);
  r.sampling.max_new_tokens = 4;
  std::string streamed;
  auto res = Run(r, &streamed);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->usage.prompt_tokens, *with_image);
  EXPECT_EQ(res->usage.visual_tokens_before, 64);
  EXPECT_EQ(res->usage.visual_tokens_after, 64);
  EXPECT_GE(res->token_ids.size(), 1u);
  EXPECT_EQ(streamed, res->text);

  img.pixels.pop_back();  // buffer no longer width * height * 3
  auto bad = engine_->Generate(r, {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("images[0]"));
}

// Prepare does the host work once: the prepared request no longer holds the
// images (its patches do), and generating from it gives what generating from
// the request gives.
TEST_F(EngineTest, PreparedRequestRunsWithoutRedoingTheHostWork) {
  const GenerateRequest r = vismoe::testing::PatternImageRequest(4);
  auto prepared = engine_->Prepare(r);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_TRUE((*prepared)->request().images.empty());
  EXPECT_EQ((*prepared)->prompt_tokens(), *engine_->CountPromptTokens(r));
  EXPECT_GE((*prepared)->prepare_seconds(), 0.0);
  auto from_prepared = engine_->Generate(**prepared, {});
  auto from_request = engine_->Generate(r, {});
  ASSERT_TRUE(from_prepared.ok()) << from_prepared.status();
  ASSERT_TRUE(from_request.ok()) << from_request.status();
  EXPECT_EQ(from_prepared->token_ids, from_request->token_ids);
  EXPECT_EQ(from_prepared->usage.prompt_tokens, (*prepared)->prompt_tokens());
  EXPECT_GE(from_prepared->timings.ttft_seconds, (*prepared)->prepare_seconds());
  // A prepared request runs as often as asked.
  auto again = engine_->Generate(**prepared, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->token_ids, from_prepared->token_ids);
}

// Policy errors surface at Prepare, before any model work.
TEST_F(EngineTest, PrepareRejectsABadPolicy) {
  GenerateRequest r = vismoe::testing::PatternImageRequest(2);
  r.policy.token_compressor = "gzip";
  auto prepared = engine_->Prepare(r);
  EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument);
  r.policy.token_compressor.reset();
  r.policy.expert_predictor = "mlp-lookahead";
  EXPECT_EQ(engine_->Prepare(r).status().code(), absl::StatusCode::kInvalidArgument);
}

// A request prepared by another engine is refused, not misread.
TEST_F(EngineTest, GenerateRefusesARequestPreparedElsewhere) {
  class Foreign final : public PreparedRequest {
   public:
    Foreign() : PreparedRequest(vismoe::testing::PatternImageRequest(2), 3, 0.0) {}
  };
  auto r = engine_->Generate(Foreign(), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EngineTextMoeTest, Qwen3MoeGreedyMatchesTransformers) {
  const std::string dir = testing::FixturesDir() + "/tiny-qwen3-moe";
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/qwen3_moe_cases.json");
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  EngineOptions o;
  o.model_path = dir;
  o.backend = "cpu";
  o.num_threads = 2;
  o.max_context_tokens = 128;
  auto e = Engine::Create(o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE((*e)->info().has_vision);
  const nlohmann::json& c = cases[0];
  GenerateRequest r;
  for (const auto& m : c["messages"]) {
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    ContentPart part;
    part.text = m["content"].get<std::string>();
    msg.content.push_back(part);
    r.messages.push_back(msg);
  }
  const std::vector<int> greedy = c["greedy_ids"].get<std::vector<int>>();
  r.sampling.max_new_tokens = 12;
  auto res = (*e)->Generate(r, {});
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_LE(res->token_ids.size(), greedy.size());
  EXPECT_EQ(res->token_ids,
            std::vector<int>(greedy.begin(), greedy.begin() + res->token_ids.size()));
  EXPECT_EQ(res->usage.prompt_tokens, static_cast<int>(c["input_ids"].size()));
  // A text-only model rejects images.
  ContentPart img;
  img.kind = ContentPart::Kind::kImage;
  img.image_index = 0;
  r.messages[0].content.push_back(img);
  r.images.resize(1);
  EXPECT_EQ((*e)->Generate(r, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EngineCreateTest, BadOptionsAreClearErrors) {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "tpu";
  EXPECT_EQ(Engine::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.backend = "cuda";
  auto cuda = Engine::Create(o);
  if (testing::CudaDeviceUsable()) {
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ((*cuda)->info().backend, "cuda");
  } else {
    // Without a device (or a CUDA build) asking for it is an error that says so.
    EXPECT_FALSE(cuda.ok());
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr("cuda"));
  }
  o.backend = "cpu";
  o.model_path = "/nonexistent/model";
  auto missing = Engine::Create(o);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/model"));
}

// Sizes and files the engine cannot honour are errors naming the setting or
// the file (issue #37), never an abort: a KV cache larger than the host's
// memory, a context past the model's positions, an end token outside the
// vocabulary.
TEST(EngineCreateTest, ImpossibleSizesAndEndTokensAreClearErrors) {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.max_context_tokens = 256;
  o.kv_cache_tokens = 1000000000;
  auto huge_kv = Engine::Create(o);
  ASSERT_FALSE(huge_kv.ok());
  EXPECT_EQ(huge_kv.status().code(), absl::StatusCode::kResourceExhausted) << huge_kv.status();
  EXPECT_THAT(std::string(huge_kv.status().message()), HasSubstr("kv_cache_tokens"));

  o.kv_cache_tokens = 0;
  o.max_context_tokens = 2147483647;
  auto huge_context = Engine::Create(o);
  ASSERT_FALSE(huge_context.ok());
  EXPECT_EQ(huge_context.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(huge_context.status().message()),
              HasSubstr("max_context_tokens (2147483647) exceeds"));

  // The fixture with end tokens outside its vocabulary.
  const std::string dir = ::testing::TempDir() + "/tiny_bad_eos";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(testing::TinyModelDir())) {
    std::filesystem::create_symlink(e.path(), dir + "/" + e.path().filename().string());
  }
  std::filesystem::remove(dir + "/generation_config.json");
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [999999, -5]})";
  o.model_path = dir;
  o.max_context_tokens = 256;
  auto bad_eos = Engine::Create(o);
  ASSERT_FALSE(bad_eos.ok());
  EXPECT_EQ(bad_eos.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_eos.status().message()),
              HasSubstr("generation_config.json: eos_token_id 999999 is outside the vocabulary"));
}

// tiny-qwen3-moe copied to a fresh directory with NaN written into every
// tensor whose name contains `poison` (F16: the whole tensor).
std::string PoisonedModel(const std::string& name, const std::string& poison) {
  const std::string src = testing::FixturesDir() + "/tiny-qwen3-moe";
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    if (e.path().extension() != ".safetensors") {
      std::filesystem::create_symlink(e.path(), dir + "/" + e.path().filename().string());
    }
  }
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return dir;
  std::vector<std::vector<uint16_t>> owned;
  std::vector<std::pair<std::string, TensorView>> tensors;
  owned.reserve((*file)->names().size());
  for (const std::string& n : (*file)->names()) {
    auto v = (*file)->Get(n);
    EXPECT_TRUE(v.ok() && v->dtype == DType::kF16) << n;
    if (!v.ok()) return dir;
    const auto* data = static_cast<const uint16_t*>(v->data);
    owned.emplace_back(data, data + v->numel());
    if (n.find(poison) != std::string::npos) {
      std::fill(owned.back().begin(), owned.back().end(), uint16_t{0x7E00});  // F16 NaN
    }
    TensorView t = *v;
    t.data = owned.back().data();
    tensors.emplace_back(n, t);
  }
  EXPECT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

// Broken weights (issue #37): a NaN in a non-expert tensor is refused at
// load, naming it; a NaN in the experts (not scanned) makes every request
// that reaches them fail INTERNAL -- never an answer of garbage -- and the
// engine goes on serving.
TEST(EngineCreateTest, NonFiniteWeightsAreRefusedOrFailTheRequest) {
  EngineOptions o;
  o.backend = "cpu";
  o.max_context_tokens = 256;
  o.model_path = PoisonedModel("tiny_nan_router", "layers.1.mlp.gate.weight");
  auto router = Engine::Create(o);
  ASSERT_FALSE(router.ok());
  EXPECT_EQ(router.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(router.status().message()),
              HasSubstr("tensor model.layers.1.mlp.gate.weight holds a NaN or an infinity"));

  o.model_path = PoisonedModel("tiny_nan_experts", "layers.0.mlp.experts.");
  auto experts = Engine::Create(o);
  ASSERT_TRUE(experts.ok()) << experts.status();
  GenerateRequest r;
  ChatMessage m;
  m.role = "user";
  ContentPart p;
  p.text = "hello";
  m.content.push_back(p);
  r.messages.push_back(m);
  r.sampling.max_new_tokens = 4;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto out = (*experts)->Generate(r, {});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal) << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("non-finite logits"));
  }
  r.sampling.temperature = 0.7f;  // drawn by the step, which finds the row not finite
  auto sampled = (*experts)->Generate(r, {});
  EXPECT_EQ(sampled.status().code(), absl::StatusCode::kInternal) << sampled.status();
}

TEST(StopMatcherTest, HoldsBackPossiblePrefixes) {
  StopMatcher m({"END", "xy"});
  auto s = m.Push("abcE");
  EXPECT_EQ(s.ready, "abc");
  EXPECT_FALSE(s.stopped);
  s = m.Push("N");
  EXPECT_EQ(s.ready, "");
  s = m.Push("Dzzz");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.ready, "");
  EXPECT_EQ(m.emitted(), "abc");
  EXPECT_TRUE(m.Push("more").stopped);

  StopMatcher n({"END"});
  EXPECT_EQ(n.Push("EN").ready, "");
  EXPECT_EQ(n.Push("x").ready, "ENx");
  EXPECT_EQ(n.Push("E").ready, "");
  EXPECT_EQ(n.Flush(), "E");
  EXPECT_EQ(n.emitted(), "ENxE");
}

TEST(KvCacheTest, FullCacheIsAClearError) {
  KvCache c(2, 4, 8);
  EXPECT_TRUE(c.CheckRoom(4).ok());
  c.Advance(3);
  auto st = c.CheckRoom(2);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("max_context_tokens"));
  c.Clear();
  EXPECT_EQ(c.length(), 0);
}

// --backend=auto says in exactly one line which device it found and which
// backend runs (no GPU in CI: the line then carries the CUDA error).
TEST(EngineBackendTest, AutoLogsOneLineOnWhichBackendRuns) {
  std::ostringstream out;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.num_threads = 1;
  o.max_context_tokens = 64;
  auto e = Engine::Create(o);
  spdlog::set_default_logger(previous);
  ASSERT_TRUE(e.ok()) << e.status();
  const bool gpu = testing::CudaDeviceUsable();
  const std::string backend = gpu ? "cuda" : "cpu";
  EXPECT_EQ((*e)->info().backend, backend);
  const std::string log = out.str();
  const std::string line = "running on the " + backend + " backend";
  size_t lines = 0;
  for (size_t p = log.find(line); p != std::string::npos; p = log.find(line, p + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << log;
#ifdef VISMOE_HAVE_CUDA
  EXPECT_NE(log.find(gpu ? "CUDA device " : "no usable CUDA device ("), std::string::npos) << log;
#else
  EXPECT_NE(log.find("built without CUDA"), std::string::npos) << log;
#endif
}

}  // namespace
}  // namespace vismoe
