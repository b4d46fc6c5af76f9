// Label gpu: the text families the CUDA backend runs beside Qwen3 -- OLMoE
// (q/k norms over the whole projection, clip_qkv), Mixtral (no q/k norms,
// an 8-token sliding window shorter than every prompt), GPT-OSS with its
// MXFP4 experts as published (attention sinks and biases, sliding layers
// between full ones, YaRN, the biased top-k-then-softmax router, experts kept
// MXFP4 in their slabs and widened before their GEMMs, with biases and the
// clamped SwiGLU, on the host-driven path) and PhiMoE (LayerNorms with
// biases, attention and lm_head biases, the sparsemixer, LongRoPE whose short
// case crosses the original context while decoding), and an FP8 checkpoint
// (Qwen3-MoE: FP8 attention weights widened at upload, FP8 experts kept FP8
// in their slabs and widened per expert before their GEMMs), and DeepSeek-V2 /
// V3 (multi-head latent attention over the latent KV cache, q_lora or not,
// interleaved and rotate_half rope, YaRN, group-limited softmax and biased
// sigmoid routers, shared experts, dense first layers; seeded synthetic
// weights of the fixtures' shapes, so the bundle carries their configs only) --
// through the one decoder over the CUDA ops, against the same decoder over
// the CPU ops (which matches transformers' goldens: qwen3_vl_moe_parity_test).
// Each golden case's prompt logits and greedy steps agree within the bf16
// tolerance of cuda_decoder_ops_gpu_test, all pinned (the device hit path and
// graph-captured decode steps) and with one pinned layer and three slabs
// (host-driven offloaded layers, slabs reused). Also an engine on
// --backend=cuda serves each. Skips without a device.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(CudaFamiliesTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/api/engine.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/backends/cuda/cuda_decoder_ops.h"
#include "engine/backends/registry.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/offload/expert_dtype.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "nlohmann/json.hpp"
#include "tests/engine/ops/cuda/gpu_test_util.h"
#include "tests/testing/golden_cases.h"
#include "tests/testing/greedy_decode.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

constexpr int kDecodeSteps = 8;
constexpr float kRelTol = 0.04f;  // as cuda_decoder_ops_gpu_test

struct Family {
  const char* fixture;
  const char* golden;
  bool synthetic = false;  // seeded weights of the fixture's config (SynthesizeCheckpoint)
};
// The second shape of each: its paths are a superset of the first's (and
// the GPU bundle carries only these, tests/gpu/travel_light.sh).
constexpr Family kFamilies[] = {{"tiny-olmoe-clip", "olmoe_clip", true},
                                {"tiny-mixtral-swa", "mixtral_swa", true},
                                {"tiny-gpt-oss-mxfp4", "gpt_oss_mxfp4"},
                                {"tiny-phimoe-longrope", "phimoe_longrope", true},
                                {"tiny-qwen3-moe-fp8", "fp8_text"},
                                {"tiny-deepseek-v2", "deepseek_v2", true},
                                {"tiny-deepseek-v3", "deepseek_v3", true},
                                {"tiny-deepseek-v3-plain", "deepseek_v3_plain", true}};
constexpr uint64_t kSyntheticSeed = 5;

const Backend& Cuda() {
  for (const Backend* b : RegisteredBackends()) {
    if (std::string_view(b->name()) == "cuda") return *b;
  }
  ADD_FAILURE() << "the cuda backend is not registered";
  return *RegisteredBackends().front();
}

// One fixture on both backends, and device providers for the CUDA one.
class Loaded {
 public:
  // `fp8_experts`: the CUDA ops reserve room to widen experts quantised at
  // load (--expert_dtype=fp8).
  void Load(const std::string& dir, bool synthetic, bool fp8_experts = false) {
    auto config = ModelConfig::Load(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto ckpt = synthetic ? SynthesizeCheckpoint(config_, kSyntheticSeed, nullptr, dir)
                          : Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = *std::move(ckpt);
    naming_ = Qwen3VlMoeModel::Experts(config_);
    auto resident = ResidentExpertProvider::Create(*ckpt_, config_.text, naming_);
    ASSERT_TRUE(resident.ok()) << resident.status();
    resident_ = *std::move(resident);
    auto cpu = Qwen3VlMoeModel::Create(config_, *ckpt_, &pool_);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    ASSERT_TRUE(Cuda().Runs(config_).ok()) << Cuda().Runs(config_);
    BackendOptions bo;
    bo.max_tokens_per_step = 256;
    bo.fp8_experts = fp8_experts;
    auto ops = Cuda().CreateDecoderOps(config_, *ckpt_, bo);
    ASSERT_TRUE(ops.ok()) << ops.status();
    auto gpu = Qwen3VlMoeModel::Create(config_, *std::move(ops));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    auto parts = Cuda().CreateOffloadDevice(bo);
    ASSERT_TRUE(parts.ok()) << parts.status();
    parts_ = *std::move(parts);
  }

  // `pinned` MoE layers and `slabs` slabs (-1: every other expert), on the
  // device, or in host memory for the CPU decoder (`host`); `dtype` set:
  // the experts quantised at load (--expert_dtype=fp8).
  std::unique_ptr<OffloadExpertProvider> Provider(int pinned, int slabs,
                                                  std::optional<DType> dtype = std::nullopt,
                                                  bool host = false) {
    auto sizes = MeasureModelSizes(*ckpt_, config_.text, naming_);
    EXPECT_TRUE(sizes.ok()) << sizes.status();
    if (!sizes.ok()) return nullptr;
    if (dtype.has_value()) {  // the plan counts packed experts, as the engine's
      auto packed = PackedExpertBytes(*resident_, sizes->moe_layers[0], *dtype);
      EXPECT_TRUE(packed.ok()) << packed.status();
      if (!packed.ok()) return nullptr;
      sizes->expert_bytes = *packed;
    }
    const int64_t layers = static_cast<int64_t>(sizes->moe_layers.size());
    if (slabs < 0) slabs = static_cast<int>((layers - pinned) * sizes->num_experts);
    MemoryPlanOptions po;
    po.pinned_layers = pinned;
    po.budget_bytes = sizes->resident_bytes +
                      (int64_t{pinned} * sizes->num_experts + slabs) * sizes->expert_bytes;
    auto plan = MakeMemoryPlan(*sizes, po);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return nullptr;
    OffloadDevice d{parts_.host_allocator.get(), parts_.device_allocator.get(), parts_.copy.get(),
                    dtype.has_value() ? dtype : parts_.expert_dtype};
    if (host) d = OffloadDevice{nullptr, nullptr, nullptr, dtype};
    auto p = OffloadExpertProvider::Create(*resident_, config_.text, *plan, OffloadOptions(),
                                           nullptr, nullptr, d);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  const ModelConfig& config() const { return config_; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  const Qwen3VlMoeModel& cpu() const { return *cpu_; }
  const Qwen3VlMoeModel& gpu() const { return *gpu_; }
  ResidentExpertProvider* resident() { return resident_.get(); }

 private:
  ModelConfig config_;
  ExpertNaming naming_{""};
  ThreadPool pool_{2};
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<ResidentExpertProvider> resident_;
  std::unique_ptr<Qwen3VlMoeModel> cpu_, gpu_;
  OffloadDeviceParts parts_;
};

// Each case's prompt logits and greedy steps: the CPU decoder over `host`
// against the CUDA decoder over `device`, within the bf16 tolerance.
void ExpectCasesAgree(const Loaded& m, ExpertProvider* host, ExpertProvider* device,
                      const nlohmann::json& cases) {
  for (const auto& c : cases) {
    const std::vector<int> ids = c["input_ids"].get<std::vector<int> >();
    std::vector<int> cpu_tokens, gpu_tokens;
    const auto cpu = testing::GreedyLogits(m.cpu(), host, ids, kDecodeSteps, nullptr, &cpu_tokens);
    const auto gpu =
        testing::GreedyLogits(m.gpu(), device, ids, kDecodeSteps, nullptr, &gpu_tokens);
    testing::ExpectGreedyAgrees(cpu, cpu_tokens, gpu, gpu_tokens, m.config().text.vocab_size,
                                kRelTol);
  }
}

TEST(CudaFamiliesTest, GoldenCasesMatchTheCpuPinnedAndOffloaded) {
  VISMOE_SKIP_WITHOUT_GPU();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.fixture);
    Loaded m;
    ASSERT_NO_FATAL_FAILURE(
        m.Load(absl::StrCat(testing::FixturesDir(), "/", f.fixture), f.synthetic));
    const nlohmann::json cases = testing::ReadJsonFile(
        absl::StrCat(testing::FixturesDir(), "/golden/", f.golden, "_cases.json"));
    ASSERT_TRUE(cases.is_array() && !cases.empty());
    int moe_layers = 0;
    for (int l = 0; l < m.config().text.num_hidden_layers; ++l) {
      moe_layers += m.config().text.IsMoeLayer(l);
    }
    for (const auto& [pinned, slabs] : {std::pair{moe_layers, 0}, std::pair{1, 3}}) {
      SCOPED_TRACE(::testing::Message() << "pinned " << pinned << ", slabs " << slabs);
      auto device = m.Provider(pinned, slabs);
      ASSERT_NE(device, nullptr);
      ExpectCasesAgree(m, m.resident(), device.get(), cases);
      std::string why;
      EXPECT_TRUE(device->CheckInvariants(&why)) << why;
    }
  }
}

// DeepSeek's decode steps (latent attention reading the cache length from the
// device, the group router, the permutation of its ids, shared experts) as
// CUDA graphs against the same ops launched one by one: the graphs are
// captured and replayed, and the logits agree to bf16 reassociation.
TEST(CudaFamiliesTest, DeepseekDecodeStepsAsGraphsMatchOpByOp) {
  VISMOE_SKIP_WITHOUT_GPU();
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(
      m.Load(absl::StrCat(testing::FixturesDir(), "/tiny-deepseek-v3"), /*synthetic=*/true));
  const nlohmann::json cases =
      testing::ReadJsonFile(absl::StrCat(testing::FixturesDir(), "/golden/deepseek_v3_cases.json"));
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  cuda::CudaDecoderOps::Options o;
  o.max_tokens_per_step = 256;
  auto graph_ops = cuda::CudaDecoderOps::Create(m.config(), m.checkpoint(), o);
  ASSERT_TRUE(graph_ops.ok()) << graph_ops.status();
  setenv("VISMOE_CUDA_GRAPHS", "0", 1);
  auto plain_ops = cuda::CudaDecoderOps::Create(m.config(), m.checkpoint(), o);
  unsetenv("VISMOE_CUDA_GRAPHS");
  ASSERT_TRUE(plain_ops.ok()) << plain_ops.status();
  const cuda::CudaDecoderOps* graphs = graph_ops->get();
  auto with_graphs = Qwen3VlMoeModel::Create(m.config(), *std::move(graph_ops));
  auto op_by_op = Qwen3VlMoeModel::Create(m.config(), *std::move(plain_ops));
  ASSERT_TRUE(with_graphs.ok() && op_by_op.ok());
  int moe_layers = 0;
  for (int l = 0; l < m.config().text.num_hidden_layers; ++l) {
    moe_layers += m.config().text.IsMoeLayer(l);
  }
  auto device = m.Provider(moe_layers, 0);
  ASSERT_NE(device, nullptr);
  for (const auto& c : cases) {
    const std::vector<int> ids = c["input_ids"].get<std::vector<int> >();
    const auto a = testing::GreedyLogits(**with_graphs, device.get(), ids, kDecodeSteps);
    const auto b = testing::GreedyLogits(**op_by_op, device.get(), ids, kDecodeSteps);
    ASSERT_EQ(a.size(), b.size());
    float worst = 0, scale = 0;
    for (size_t step = 0; step < a.size(); ++step) {
      ASSERT_EQ(a[step].size(), b[step].size());
      for (size_t i = 0; i < a[step].size(); ++i) {
        worst = std::max(worst, std::fabs(a[step][i] - b[step][i]));
        scale = std::max(scale, std::fabs(b[step][i]));
      }
    }
    EXPECT_LE(worst, 1e-3f * scale) << "graph vs op by op";
  }
  EXPECT_GE(graphs->graphs_captured(), 1);
  EXPECT_GT(graphs->graph_launches(), graphs->graphs_captured());
  // And the graphs hold DeviceMoe: a decode-sized step prepares it for every
  // pinned MoE layer (the provider pins them all).
  auto cache = graphs->CreateKvCache(8);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const std::vector<int> token = {1};
  const std::vector<int64_t> positions = {0, 0, 0};
  StepInput in;
  in.tokens = token;
  in.positions = positions;
  auto step = graphs->BeginStep(in, cache->get());
  ASSERT_TRUE(step.ok()) << step.status();
  for (int l = 0; l < m.config().text.num_hidden_layers; ++l) {
    if (m.config().text.IsMoeLayer(l)) {
      EXPECT_TRUE((*step)->PrepareDeviceMoe(l, device.get())) << l;
    }
  }
}

// DeepSeek-VL2 (latent attention, the biased sigmoid router) served with an
// image by an engine on --backend=cuda: its tower on the host's ops, its
// language model on the device; the same prompt and visual tokens as the CPU
// engine's over the same synthetic weights, and tokens out.
TEST(CudaFamiliesTest, DeepseekVl2ServesAnImageWithItsLanguageModelOnCuda) {
  VISMOE_SKIP_WITHOUT_GPU();
  RgbImage image;
  image.width = 200;
  image.height = 150;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      for (int c = 0; c < 3; ++c)
        image.pixels.push_back(static_cast<uint8_t>((x * 3 + y * 5 + c * 70) % 256));
    }
  }
  GenerateRequest request;
  request.images.push_back(image);
  ChatMessage user;
  user.role = "user";
  user.content.push_back(ContentPart{ContentPart::Kind::kImage, "", 0});
  user.content.push_back(ContentPart{ContentPart::Kind::kText, "What is in the picture?", -1});
  request.messages.push_back(user);
  request.sampling.max_new_tokens = 8;
  std::vector<GenerateResult> results;
  for (const char* backend : {"cpu", "cuda"}) {
    SCOPED_TRACE(backend);
    EngineOptions o;
    o.model_path = absl::StrCat(testing::FixturesDir(), "/tiny-deepseek-vl2-mla");
    o.backend = backend;
    o.max_context_tokens = 512;
    o.synthetic_weights = true;
    o.synthetic_seed = kSyntheticSeed;
    auto engine = Engine::Create(o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->info().backend, backend);
    auto r = (*engine)->Generate(request, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->token_ids.empty());
    results.push_back(*std::move(r));
  }
  EXPECT_GT(results[0].usage.visual_tokens_before, 0);
  EXPECT_EQ(results[1].usage.visual_tokens_before, results[0].usage.visual_tokens_before);
  EXPECT_EQ(results[1].usage.prompt_tokens, results[0].usage.prompt_tokens);
}

// --expert_dtype=fp8 on CUDA: a bf16 checkpoint's experts quantised at load
// (128 x 128 blocks), kept FP8 in their slabs and widened per group before
// their GEMMs, against the CPU decoder over the same quantised experts --
// all pinned and with one pinned layer and three slabs.
TEST(CudaFamiliesTest, ExpertsQuantisedAtLoadMatchTheCpuOnes) {
  VISMOE_SKIP_WITHOUT_GPU();
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(m.Load(absl::StrCat(testing::FixturesDir(), "/tiny-qwen3-moe"),
                                 /*synthetic=*/false, /*fp8_experts=*/true));
  const nlohmann::json cases =
      testing::ReadJsonFile(absl::StrCat(testing::FixturesDir(), "/golden/qwen3_moe_cases.json"));
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  int moe_layers = 0;
  for (int l = 0; l < m.config().text.num_hidden_layers; ++l) {
    moe_layers += m.config().text.IsMoeLayer(l);
  }
  auto host = m.Provider(moe_layers, 0, DType::kF8E4M3, /*host=*/true);
  ASSERT_NE(host, nullptr);
  for (const auto& [pinned, slabs] : {std::pair{moe_layers, 0}, std::pair{1, 3}}) {
    SCOPED_TRACE(::testing::Message() << "pinned " << pinned << ", slabs " << slabs);
    auto device = m.Provider(pinned, slabs, DType::kF8E4M3);
    ASSERT_NE(device, nullptr);
    int first_moe = 0;
    while (!m.config().text.IsMoeLayer(first_moe)) ++first_moe;
    auto pinned_weights = device->PinnedWeights(first_moe, 0);  // the device holds FP8 experts
    ASSERT_TRUE(pinned_weights.ok()) << pinned_weights.status();
    EXPECT_EQ(pinned_weights->down.dtype, DType::kF8E4M3);
    EXPECT_EQ(pinned_weights->layout, ExpertWeights::Layout::kSeparate);
    ExpectCasesAgree(m, host.get(), device.get(), cases);
    std::string why;
    EXPECT_TRUE(device->CheckInvariants(&why)) << why;
  }
}

// Named, the backend serves them (with a warning until this test has run on
// a GPU); "auto" keeps them on the CPU until then.
TEST(CudaFamiliesTest, TheEngineServesThemWhenCudaIsNamed) {
  VISMOE_SKIP_WITHOUT_GPU();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.fixture);
    EngineOptions o;
    o.model_path = absl::StrCat(testing::FixturesDir(), "/", f.fixture);
    o.backend = "cuda";
    o.max_context_tokens = 256;
    o.synthetic_weights = f.synthetic;
    o.synthetic_seed = kSyntheticSeed;
    auto engine = Engine::Create(o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->info().backend, "cuda");
    const nlohmann::json cases = testing::ReadJsonFile(
        absl::StrCat(testing::FixturesDir(), "/golden/", f.golden, "_cases.json"));
    ASSERT_TRUE(cases.is_array() && !cases.empty());
    auto r = (*engine)->Generate(testing::TextRequestFromCase(cases[0], 8), {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->token_ids.empty());
  }
}

}  // namespace
}  // namespace vismoe

#endif  // VISMOE_HAVE_CUDA
