// Label gpu: the decoder over CudaDecoderOps against the CPU reference on the tiny
// Qwen3-VL-MoE fixture. Logits agree within a bf16-scaled tolerance; greedy
// tokens are equal, or -- where bf16 rounding flips a near-tie -- the CPU's
// logit margin between the two choices at the first divergence is below that
// tolerance. Experts come through the offload provider on the CUDA copy path,
// from everything pinned down to one slab (which exercises slab reuse behind
// the compute stream), and with experts computed on the host (miss policy
// cpu, static host layers). Skips without a device.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(Qwen3VlMoeCudaTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "engine/arch/mrope_positions.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/arch/qwen3_vl_vision.h"
#include "engine/backends/cuda/cuda_decoder_ops.h"
#include "engine/core/argmax.h"
#include "engine/core/dtype.h"
#include "engine/core/thread_pool.h"
#include "engine/core/token_draw.h"
#include "engine/device/cuda/cuda_copy_backend.h"
#include "engine/device/cuda/cuda_device_allocator.h"
#include "engine/device/cuda/pinned_host_allocator.h"
#include "engine/model/checkpoint.h"
#include "engine/model/safetensors_file.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "nlohmann/json.hpp"
#include "tests/engine/ops/cuda/gpu_test_util.h"
#include "tests/testing/greedy_decode.h"
#include "tests/testing/image_request.h"
#include "tests/testing/paths.h"

namespace vismoe::cuda {
namespace {

constexpr int kDecodeSteps = 8;
// bf16 keeps 8 significant bits; a few layers of bf16 activations on the tiny
// model stay within a few percent of the logit range.
constexpr float kRelTol = 0.04f;

void ExpectGreedyAgrees(const std::vector<std::vector<float> >& cpu,
                        const std::vector<int>& cpu_tokens,
                        const std::vector<std::vector<float> >& gpu,
                        const std::vector<int>& gpu_tokens, int vocab) {
  vismoe::testing::ExpectGreedyAgrees(cpu, cpu_tokens, gpu, gpu_tokens, vocab, kRelTol);
}

class CudaDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VISMOE_SKIP_WITHOUT_GPU();
    const std::string dir = vismoe::testing::TinyModelDir();
    auto config = ModelConfig::Load(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = *std::move(ckpt);
    prefix_ = Qwen3VlMoeModel::TextPrefix(config_);
    auto resident = ResidentExpertProvider::Create(*ckpt_, config_.text, prefix_);
    ASSERT_TRUE(resident.ok()) << resident.status();
    resident_ = *std::move(resident);
    auto cpu = Qwen3VlMoeModel::Create(config_, *ckpt_, &pool_);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    CudaDecoderOps::Options o;
    o.max_tokens_per_step = 512;
    o.device_sampling = true;  // DrawnTokensAreTheHostsDrawsFromTheSameLogits runs it
    auto ops = CudaDecoderOps::Create(config_, *ckpt_, o);
    ASSERT_TRUE(ops.ok()) << ops.status();
    auto gpu = Qwen3VlMoeModel::Create(config_, *std::move(ops));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    auto copy = CudaCopyBackend::Create(0);
    ASSERT_TRUE(copy.ok()) << copy.status();
    copy_ = *std::move(copy);
  }

  int NumMoeLayers() const {
    int m = 0;
    for (int l = 0; l < config_.text.num_hidden_layers; ++l) m += config_.text.IsMoeLayer(l);
    return m;
  }

  // An offload provider on the CUDA copy path with `pinned` MoE layers and
  // `slabs` slabs (-1 = every offloaded expert).
  std::unique_ptr<OffloadExpertProvider> DeviceProvider(int pinned, int slabs,
                                                        const std::string& prefetch,
                                                        const OffloadOptions& base = {}) {
    auto sizes = MeasureModelSizes(*ckpt_, config_.text, prefix_);
    EXPECT_TRUE(sizes.ok()) << sizes.status();
    if (!sizes.ok()) return nullptr;
    const int e = config_.text.num_experts;
    if (slabs < 0) slabs = (NumMoeLayers() - pinned) * e;
    MemoryPlanOptions po;
    po.pinned_layers = pinned;
    po.budget_bytes =
        sizes->resident_bytes + (static_cast<int64_t>(pinned) * e + slabs) * sizes->expert_bytes;
    auto plan = MakeMemoryPlan(*sizes, po);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return nullptr;
    OffloadOptions oo = base;
    oo.prefetch = prefetch;
    OffloadDevice device;
    device.host_allocator = &host_alloc_;
    device.device_allocator = &device_alloc_;
    device.copy = copy_.get();
    device.expert_dtype = DType::kBF16;  // as the engine sets it: the fixture may be F16/F32
    std::unique_ptr<ExpertPredictor> none;
    auto p = OffloadExpertProvider::Create(*resident_, config_.text, *plan, oo, nullptr,
                                           std::move(none), device);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  ModelConfig config_;
  std::string prefix_;
  ThreadPool pool_{2};
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<ResidentExpertProvider> resident_;
  std::unique_ptr<Qwen3VlMoeModel> cpu_;
  std::unique_ptr<Qwen3VlMoeModel> gpu_;  // over CudaDecoderOps
  PinnedHostAllocator host_alloc_;
  CudaDeviceAllocator device_alloc_{0};
  std::unique_ptr<CudaCopyBackend> copy_;
};

TEST_F(CudaDecoderTest, TextCasesMatchTheCpuReferenceForEveryPlacement) {
  const nlohmann::json cases = vismoe::testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  const int vocab = config_.text.vocab_size;
  // host_experts: packed copies come from page-locked memory, mapped ones
  // from the checkpoint's pageable pages (bf16 fixture: nothing to convert).
  struct Variant {
    int pinned, slabs;
    std::string host_experts;
  };
  for (const Variant& v :
       {Variant{NumMoeLayers(), 0, "packed"}, Variant{0, 1, "packed"}, Variant{1, 3, "packed"},
        Variant{0, -1, "packed"}, Variant{0, 1, "mapped"}, Variant{1, 3, "mapped"}}) {
    SCOPED_TRACE(::testing::Message()
                 << "pinned " << v.pinned << " slabs " << v.slabs << " " << v.host_experts);
    OffloadOptions oo;
    oo.host_experts = v.host_experts;
    auto device = DeviceProvider(v.pinned, v.slabs, "none", oo);
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->host_experts_mapped(), v.host_experts == "mapped");
    for (const auto& c : cases) {
      const std::vector<int> ids = c["input_ids"].get<std::vector<int> >();
      std::vector<int> cpu_tokens, gpu_tokens;
      auto cpu = vismoe::testing::GreedyLogits(*cpu_, resident_.get(), ids, kDecodeSteps, nullptr,
                                               &cpu_tokens);
      auto gpu = vismoe::testing::GreedyLogits(*gpu_, device.get(), ids, kDecodeSteps, nullptr,
                                               &gpu_tokens);
      ExpectGreedyAgrees(cpu, cpu_tokens, gpu, gpu_tokens, vocab);
    }
    std::string why;
    EXPECT_TRUE(device->CheckInvariants(&why)) << why;
  }
}

// Experts computed on the host (rows copied down, CPU kernels over the bf16
// host store, outputs copied back into the permuted rows) agree with the CPU
// reference as the device's do. A throttled copy engine (5 MB/s) makes the
// cpu policy put misses on the host; the static placement does so always.
TEST_F(CudaDecoderTest, HostExecutionMatchesTheCpuReference) {
  const nlohmann::json cases = vismoe::testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  const int vocab = config_.text.vocab_size;
  struct Variant {
    int pinned, slabs;
    const char* miss_policy;
    int host_layers;
  };
  for (const Variant& v : {Variant{1, 2, "cpu", 0}, Variant{1, 1, "fetch", NumMoeLayers() - 1},
                           Variant{0, 3, "cpu", 2}}) {
    SCOPED_TRACE(::testing::Message() << "pinned " << v.pinned << " slabs " << v.slabs << " "
                                      << v.miss_policy << " host layers " << v.host_layers);
    OffloadOptions oo;
    oo.miss_policy = v.miss_policy;
    oo.host_moe_layers = v.host_layers;
    oo.copy_bandwidth_bytes_per_s = 5e6;
    auto device = DeviceProvider(v.pinned, v.slabs, "history", oo);
    ASSERT_NE(device, nullptr);
    for (const auto& c : cases) {
      const std::vector<int> ids = c["input_ids"].get<std::vector<int> >();
      std::vector<int> cpu_tokens, gpu_tokens;
      auto cpu = vismoe::testing::GreedyLogits(*cpu_, resident_.get(), ids, kDecodeSteps, nullptr,
                                               &cpu_tokens);
      auto gpu = vismoe::testing::GreedyLogits(*gpu_, device.get(), ids, kDecodeSteps, nullptr,
                                               &gpu_tokens);
      ExpectGreedyAgrees(cpu, cpu_tokens, gpu, gpu_tokens, vocab);
    }
    device->WaitForTransfers();
    const OffloadStats s = device->TakeRequestStats();
    EXPECT_GT(s.experts_host_computed, 0u);
    if (v.pinned + v.host_layers == NumMoeLayers()) {
      EXPECT_EQ(s.bytes_h2d, 0u);  // every offloaded layer on the host
    }
    std::string why;
    EXPECT_TRUE(device->CheckInvariants(&why)) << why;
  }
}

TEST_F(CudaDecoderTest, MultimodalPrefillMatchesTheCpuReference) {
  const std::string gold = vismoe::testing::FixturesDir() + "/golden";
  std::ifstream in(gold + "/mm_cases.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json cases = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  auto vision = Qwen3VlVisionModel::Create(config_, *ckpt_, &pool_);
  ASSERT_TRUE(vision.ok()) << vision.status();
  auto pixels = SafetensorsFile::Open(gold + "/pixel_values.safetensors");
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  auto device = DeviceProvider(1, 2, "none");
  ASSERT_NE(device, nullptr);
  const int vocab = config_.text.vocab_size;
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<int> ids = c["input_ids"].get<std::vector<int> >();
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
    auto pos = ComputeMropePositions(ids, grids, config_);
    ASSERT_TRUE(pos.ok()) << pos.status();
    auto vis = (*vision)->Forward(patches, grids);
    ASSERT_TRUE(vis.ok()) << vis.status();
    DecoderInput input;
    input.tokens = ids;
    input.positions = pos->positions;
    input.visual_embeds = vis->embeds.data();
    input.num_visual = vis->num_tokens;
    for (const auto& ds : vis->deepstack) input.deepstack.push_back(ds.data());
    input.all_logits = true;
    std::vector<float> cpu_logits, gpu_logits;
    auto cpu_cache = cpu_->CreateKvCache(static_cast<int64_t>(ids.size()));
    auto gpu_cache = gpu_->CreateKvCache(static_cast<int64_t>(ids.size()));
    ASSERT_TRUE(cpu_cache.ok() && gpu_cache.ok());
    ASSERT_TRUE(cpu_->Forward(input, cpu_cache->get(), resident_.get(), &cpu_logits).ok());
    absl::Status st = gpu_->Forward(input, gpu_cache->get(), device.get(), &gpu_logits);
    ASSERT_TRUE(st.ok()) << st;
    auto argmax_last = [vocab](const std::vector<float>& l) {
      return static_cast<int>(std::max_element(l.end() - vocab, l.end()) - (l.end() - vocab));
    };
    ExpectGreedyAgrees({cpu_logits}, {argmax_last(cpu_logits)}, {gpu_logits},
                       {argmax_last(gpu_logits)}, vocab);
  }
}

// Decode steps run as CUDA graphs (recorded once, replayed while the decoder
// calls the same ops; step_graphs.h) give the logits of the same steps
// launched op by op, and greedy steps that take only the argmax back give its
// tokens; a new provider makes the step differ, and it records anew.
TEST_F(CudaDecoderTest, DecodeStepsAsGraphsMatchOpByOpLaunches) {
  const nlohmann::json cases = vismoe::testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  CudaDecoderOps::Options o;
  o.max_tokens_per_step = 512;
  auto graph_ops = CudaDecoderOps::Create(config_, *ckpt_, o);
  ASSERT_TRUE(graph_ops.ok()) << graph_ops.status();
  setenv("VISMOE_CUDA_GRAPHS", "0", 1);
  auto plain_ops = CudaDecoderOps::Create(config_, *ckpt_, o);
  unsetenv("VISMOE_CUDA_GRAPHS");
  ASSERT_TRUE(plain_ops.ok()) << plain_ops.status();
  const CudaDecoderOps* graphs = graph_ops->get();
  const CudaDecoderOps* plain = plain_ops->get();
  auto with_graphs = Qwen3VlMoeModel::Create(config_, *std::move(graph_ops));
  auto op_by_op = Qwen3VlMoeModel::Create(config_, *std::move(plain_ops));
  ASSERT_TRUE(with_graphs.ok() && op_by_op.ok());
  for (int round = 0; round < 2; ++round) {  // the second provider records anew
    auto device = DeviceProvider(NumMoeLayers(), 0, "none");
    ASSERT_NE(device, nullptr);
    for (const auto& c : cases) {
      const std::vector<int> ids = c["input_ids"].get<std::vector<int> >();
      const auto a = vismoe::testing::GreedyLogits(**with_graphs, device.get(), ids, kDecodeSteps);
      const auto b = vismoe::testing::GreedyLogits(**op_by_op, device.get(), ids, kDecodeSteps);
      ASSERT_EQ(a.size(), b.size());
      float worst = 0;
      for (size_t step = 0; step < a.size(); ++step) {
        ASSERT_EQ(a[step].size(), b[step].size());
        for (size_t i = 0; i < a[step].size(); ++i) {
          worst = std::max(worst, std::fabs(a[step][i] - b[step][i]));
        }
      }
      EXPECT_LE(worst, 1e-3f * testing::MaxAbs(b.back())) << "graph vs op by op";
      RecordProperty("graph_max_abs_diff", std::to_string(worst));
    }
    EXPECT_EQ(plain->graph_launches(), 0);
  }
  EXPECT_GE(graphs->graphs_captured(), 2);
  EXPECT_GT(graphs->graph_launches(), graphs->graphs_captured());

  // Greedy steps: the tokens of the argmax, nothing else back.
  auto device = DeviceProvider(NumMoeLayers(), 0, "none");
  const std::vector<int> ids = cases[0]["input_ids"].get<std::vector<int> >();
  auto ref = vismoe::testing::GreedyLogits(**op_by_op, device.get(), ids, kDecodeSteps);
  auto cache = (*with_graphs)->CreateKvCache(256);
  ASSERT_TRUE(cache.ok());
  std::vector<int> next = ids;
  for (int step = 0; step <= kDecodeSteps; ++step) {
    DecoderInput in;
    in.tokens = next;
    in.phase = step == 0 ? Phase::kPrefill : Phase::kDecode;
    std::vector<float> logits;
    int token = -1;
    const DecoderBatchEntry entry{&in, cache->get(), &logits, &token};
    ASSERT_TRUE((*with_graphs)->ForwardBatch(absl::MakeConstSpan(&entry, 1), device.get()).ok());
    EXPECT_TRUE(logits.empty());
    const std::vector<float>& want = ref[step];
    const int vocab = config_.text.vocab_size;
    const int expected =
        static_cast<int>(std::max_element(want.end() - vocab, want.end()) - (want.end() - vocab));
    EXPECT_EQ(token, expected) << "step " << step;
    next = {token};
  }
}

// A batched step on the device matches the CPU's batched step (itself equal
// to each sequence alone, qwen3_vl_moe_batch_test): every text case prefilled
// in one step, then decode steps, joined by a new prefill. The device caches
// share one KV pool, so as they grow their block tables interleave.
TEST_F(CudaDecoderTest, BatchedStepsMatchTheCpuReference) {
  const nlohmann::json cases = vismoe::testing::TextCases();
  ASSERT_TRUE(cases.is_array() && cases.size() >= 2);
  auto device = DeviceProvider(1, 2, "none");
  ASSERT_NE(device, nullptr);
  const int vocab = config_.text.vocab_size;
  const size_t m = cases.size();
  std::vector<std::vector<int> > ids(m + 1);
  for (size_t i = 0; i < m; ++i) ids[i] = cases[i]["input_ids"].get<std::vector<int> >();
  ids[m] = ids[0];  // the late joiner
  auto gpu_pool = gpu_->CreateKvPool(static_cast<int64_t>(m + 1) * 16, 16);
  ASSERT_TRUE(gpu_pool.ok()) << gpu_pool.status();
  std::vector<std::unique_ptr<KvCache> > cpu_caches, gpu_caches;
  for (size_t i = 0; i <= m; ++i) {
    auto c = cpu_->CreateKvCache(256);
    ASSERT_TRUE(c.ok());
    cpu_caches.push_back(*std::move(c));
    gpu_caches.push_back(std::make_unique<KvCache>(gpu_pool->get(), 256));
  }
  std::vector<DecoderInput> inputs(m + 1);
  std::vector<std::vector<float> > cpu_logits(m + 1), gpu_logits(m + 1);
  auto run = [&](const std::vector<size_t>& which) {
    std::vector<DecoderBatchEntry> cpu_batch, gpu_batch;
    for (size_t i : which) {
      cpu_batch.push_back({&inputs[i], cpu_caches[i].get(), &cpu_logits[i]});
      gpu_batch.push_back({&inputs[i], gpu_caches[i].get(), &gpu_logits[i]});
    }
    ASSERT_TRUE(cpu_->ForwardBatch(cpu_batch, resident_.get()).ok());
    absl::Status st = gpu_->ForwardBatch(gpu_batch, device.get());
    ASSERT_TRUE(st.ok()) << st;
    for (size_t i : which) {
      SCOPED_TRACE(::testing::Message() << "sequence " << i);
      const int token = static_cast<int>(
          std::max_element(cpu_logits[i].begin(), cpu_logits[i].end()) - cpu_logits[i].begin());
      const int gpu_token = static_cast<int>(
          std::max_element(gpu_logits[i].begin(), gpu_logits[i].end()) - gpu_logits[i].begin());
      ExpectGreedyAgrees({cpu_logits[i]}, {token}, {gpu_logits[i]}, {gpu_token}, vocab);
      ids[i] = {token};  // both backends decode the CPU's token next
    }
  };
  std::vector<size_t> first(m);
  for (size_t i = 0; i < m; ++i) first[i] = i;
  for (size_t i = 0; i < m; ++i) inputs[i].tokens = ids[i];
  run(first);
  std::vector<size_t> second = first;
  second.push_back(m);
  for (size_t i = 0; i < m; ++i) {
    inputs[i].tokens = ids[i];
    inputs[i].phase = Phase::kDecode;
  }
  inputs[m].tokens = ids[m];
  run(second);
  inputs[m].phase = Phase::kDecode;
  for (int step = 0; step < 20; ++step) {  // every sequence crosses a block boundary
    for (size_t i = 0; i <= m; ++i) inputs[i].tokens = ids[i];
    run(second);
  }
  bool interleaved = false;
  for (const auto& c : gpu_caches) {
    const std::vector<int32_t>& b = c->blocks();
    for (size_t j = 1; j < b.size(); ++j) interleaved = interleaved || b[j] != b[j - 1] + 1;
  }
  EXPECT_TRUE(interleaved) << "no block table has a gap: the test reads no scattered blocks";
  std::string why;
  EXPECT_TRUE(device->CheckInvariants(&why)) << why;
}

// A step whose entries want tokens, not logits, draws them on the device
// (DrawTokens): each the token the host draws from the logits the same step
// returns -- a sampled draw (DrawTokenRows), a top_k draw (left to the host,
// the row's logits computed again) and a greedy one.
TEST_F(CudaDecoderTest, DrawnTokensAreTheHostsDrawsFromTheSameLogits) {
  const nlohmann::json cases = vismoe::testing::TextCases();
  ASSERT_TRUE(cases.is_array() && cases.size() >= 2);
  auto device = DeviceProvider(NumMoeLayers(), 0, "none");  // all pinned: the same sums twice
  ASSERT_NE(device, nullptr);
  const std::vector<TokenDraw> draws = {
      {1.0f, 0, 0.9f, 0.37}, {0.8f, 3, 1.0f, 0.61}, {0.0f, 0, 1.0f, 0.0}};
  const size_t n = draws.size();
  std::vector<DecoderInput> inputs(n);
  for (size_t i = 0; i < n; ++i) {
    inputs[i].tokens = cases[i % cases.size()]["input_ids"].get<std::vector<int> >();
  }
  std::vector<std::unique_ptr<KvCache> > a, b;
  std::vector<std::vector<float> > logits(n), unused(n);
  std::vector<int> tokens(n, -5);
  std::vector<DecoderBatchEntry> with_logits, with_tokens;
  for (size_t i = 0; i < n; ++i) {
    a.push_back(gpu_->NewKvCache(256));
    b.push_back(gpu_->NewKvCache(256));
    with_logits.push_back({&inputs[i], a[i].get(), &logits[i]});
    with_tokens.push_back({&inputs[i], b[i].get(), &unused[i], &tokens[i], &draws[i]});
  }
  absl::Status st = gpu_->ForwardBatch(with_logits, device.get());
  ASSERT_TRUE(st.ok()) << st;
  st = gpu_->ForwardBatch(with_tokens, device.get());
  ASSERT_TRUE(st.ok()) << st;
  TokenPicker picker;
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(::testing::Message() << "entry " << i);
    EXPECT_TRUE(unused[i].empty());
    ASSERT_EQ(logits[i].size(), static_cast<size_t>(config_.text.vocab_size));
    const int want =
        draws[i].temperature == 0.0f ? GreedyArgmax(logits[i]) : picker.Pick(logits[i], draws[i]);
    EXPECT_EQ(tokens[i], want);
  }
}

TEST_F(CudaDecoderTest, BadInputIsAClearErrorAndTheModelKeepsWorking) {
  auto device = DeviceProvider(1, 2, "none");
  ASSERT_NE(device, nullptr);
  std::vector<float> logits;
  const std::vector<int> ids = {1, 2, 3};
  DecoderInput in;
  in.tokens = ids;
  auto host_cache = cpu_->NewKvCache(8);  // not a device pool's cache: refused
  EXPECT_EQ(gpu_->Forward(in, host_cache.get(), device.get(), &logits).code(),
            absl::StatusCode::kInvalidArgument);
  auto cache = gpu_->CreateKvCache(8);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const std::vector<int> bad = {1, config_.text.vocab_size};
  DecoderInput bad_in;
  bad_in.tokens = bad;
  EXPECT_EQ(gpu_->Forward(bad_in, cache->get(), device.get(), &logits).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int> many(600, 1);  // over max_tokens_per_step
  DecoderInput big;
  big.tokens = many;
  EXPECT_EQ(gpu_->Forward(big, cache->get(), device.get(), &logits).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(gpu_->Forward(in, cache->get(), device.get(), &logits).ok());
  EXPECT_EQ((*cache)->length(), 3);
  EXPECT_EQ(logits.size(), static_cast<size_t>(config_.text.vocab_size));
}

GenerateRequest ImageRequest() { return vismoe::testing::PatternImageRequest(4); }

// Through the public Engine API, offloading with token compression on: the
// CUDA engine drops visual tokens and still answers.
TEST(CudaEngineTest, CompressedOffloadedImageRequestRuns) {
  VISMOE_SKIP_WITHOUT_GPU();
  EngineOptions o;
  o.model_path = vismoe::testing::TinyModelDir();
  o.backend = "cuda";
  o.max_context_tokens = 512;
  o.gpu_memory_budget_bytes = 64 << 20;
  o.offload.pinned_layers = 1;
  o.offload.prefetch = "history";
  o.compression.kind = "affinity";
  o.compression.beta = 0.5;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().backend, "cuda");
  auto res = (*engine)->Generate(ImageRequest(), {});
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->token_ids.size(), 4u);
  EXPECT_LT(res->usage.visual_tokens_after, res->usage.visual_tokens_before);
  EXPECT_GT(res->offload.cache_queries, 0u);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
