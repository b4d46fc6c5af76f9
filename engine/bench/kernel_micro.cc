#include "engine/bench/kernel_micro.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/ops/cpu/kernel_dispatch.h"
#include "engine/ops/cpu/linear.h"

namespace vismoe::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Copies of each weight are cycled so that one round touches at least this
// many bytes: more than any last-level cache, so decode streams from DRAM.
constexpr size_t kColdBytes = size_t{192} << 20;

volatile float g_sink = 0;

struct Shape2 {
  std::string name;
  int64_t rows_or_in, cols_or_out;  // [out, in], or [in, out] when transposed
  bool transposed;
};

// Mean seconds per call of fn over at least min_seconds (>= 3 calls, one warm-up).
double TimeMean(double min_seconds, const std::function<void()>& fn) {
  fn();
  int64_t calls = 0;
  const Clock::time_point t0 = Clock::now();
  double elapsed = 0;
  while (calls < 3 || elapsed < min_seconds) {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return elapsed / static_cast<double>(calls);
}

// GB/s of one streaming sum per thread over 256 MiB of floats.
double ReadBandwidth(ThreadPool* pool) {
  std::vector<float> buf((size_t{256} << 20) / sizeof(float), 1.0f);
  const int64_t n = static_cast<int64_t>(buf.size());
  const double s = TimeMean(0.3, [&] {
    ParallelFor(pool, n, n / pool->size(), [&](int64_t b, int64_t e) {
      float acc[16] = {};
      for (int64_t i = b; i + 16 <= e; i += 16) {
        for (int l = 0; l < 16; ++l) acc[l] += buf[i + l];
      }
      float t = 0;
      for (float a : acc) t += a;
      g_sink = g_sink + t;
    });
  });
  return static_cast<double>(buf.size() * sizeof(float)) / s / 1e9;
}

std::vector<Shape2> DecoderShapes(const TextConfig& t) {
  const int64_t h = t.hidden_size, hd = t.head_dim, i = t.moe_intermediate_size;
  std::vector<Shape2> s = {
      {"attn.q", int64_t{t.num_attention_heads} * hd, h, false},
      {"attn.kv", int64_t{t.num_key_value_heads} * hd, h, false},
      {"attn.o", h, int64_t{t.num_attention_heads} * hd, false},
      {"router", t.num_experts, h, false},
      {"expert.gate_up", i, h, false},
      {"expert.down", h, i, false},
      {"expert_fused.gate_up_T", h, 2 * i, true},
      {"expert_fused.down_T", i, h, true},
      {"lm_head", t.vocab_size, h, false},
  };
  if (t.intermediate_size > 0) s.push_back({"dense.gate_up", t.intermediate_size, h, false});
  return s;
}

// `copies` random weight tensors of `numel` elements each in dtype d (e4m3
// codes and MXFP4 bytes are random bit patterns, NaN codes excluded).
std::vector<std::vector<char>> RandomCopies(DType d, int64_t numel, int copies, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<std::vector<char>> out(copies, std::vector<char>(DTypeBytes(d, numel)));
  for (auto& c : out) {
    if (d == DType::kF8E4M3 || d == DType::kMxFp4) {
      for (char& b : c) b = static_cast<char>(rng() % (d == DType::kF8E4M3 ? 0x7f : 0x100));
      continue;
    }
    for (int64_t k = 0; k < numel; ++k) {
      const float v = u(rng);
      if (d == DType::kF32) {
        std::memcpy(c.data() + 4 * k, &v, 4);
      } else {
        const uint16_t hv = d == DType::kBF16 ? FloatToBf16(v) : FloatToF16(v);
        std::memcpy(c.data() + 2 * k, &hv, 2);
      }
    }
  }
  return out;
}

// Block scales of a weight [out, in] in dtype d, as its checkpoints store
// them (F8_E4M3: F32 per 128 x 128; MXFP4: e8m0 per 1 x 32), in `storage`;
// no scale for the other dtypes.
BlockScale RandomScales(DType d, int64_t out, int64_t in, std::mt19937& rng,
                        std::vector<char>* storage) {
  if (d != DType::kF8E4M3 && d != DType::kMxFp4) return {};
  const bool fp8 = d == DType::kF8E4M3;
  const BlockScale b{nullptr, fp8 ? DType::kF32 : DType::kE8M0, fp8 ? 128 : 1, fp8 ? 128 : 32};
  const int64_t n = CeilDiv(out, b.rows) * CeilDiv(in, b.cols);
  storage->resize(DTypeBytes(b.dtype, n));
  for (int64_t k = 0; k < n; ++k) {
    if (fp8) {
      const float v = 1.0f / 4096;
      std::memcpy(storage->data() + 4 * k, &v, 4);
    } else {
      (*storage)[k] = static_cast<char>(120 + rng() % 8);
    }
  }
  BlockScale s = b;
  s.data = storage->data();
  return s;
}

// One shape, dtype and row count: the reference, then every kernel path.
nlohmann::json BenchOne(const Shape2& s, DType d, int64_t rows, double min_seconds,
                        ThreadPool* pool, std::mt19937& rng) {
  const int64_t in = s.transposed ? s.rows_or_in : s.cols_or_out;
  const int64_t out = s.transposed ? s.cols_or_out : s.rows_or_in;
  std::vector<char> scale_storage;
  const BlockScale scale = RandomScales(d, out, in, rng, &scale_storage);
  // Bytes streamed per call: the weight and its scales.
  const size_t bytes = DTypeBytes(d, in * out) + scale_storage.size();
  const int copies = static_cast<int>(std::clamp<size_t>(kColdBytes / bytes, 1, 64));
  const auto ws = RandomCopies(d, in * out, copies, rng);
  std::vector<float> x(rows * in, 0.01f), y(rows * out);
  int next = 0;
  auto call = [&](bool reference) {
    const TensorView w{ws[next].data(), d, s.transposed ? Shape{in, out} : Shape{out, in}, scale};
    next = (next + 1) % copies;
    if (s.transposed) {
      (reference ? cpu::LinearTransposedReference : cpu::LinearTransposed)(pool, x.data(), rows,
                                                                           in, w, y.data());
    } else {
      (reference ? cpu::LinearReference : cpu::Linear)(pool, x.data(), rows, in, w, nullptr,
                                                       y.data());
    }
    g_sink = g_sink + y[0];
  };
  nlohmann::json j = {{"name", absl::StrCat(s.name, ".", std::string(DTypeName(d)), ".rows", rows)},
                      {"shape", s.transposed ? std::vector<int64_t>{in, out}
                                             : std::vector<int64_t>{out, in}},
                      {"layout", s.transposed ? "in_out" : "out_in"},
                      {"dtype", std::string(DTypeName(d))},
                      {"rows", rows}};
  const double ref = TimeMean(min_seconds, [&] { call(true); });
  j["reference_us"] = ref * 1e6;
  for (cpu::KernelPath p : cpu::AvailableKernelPaths()) {
    const auto old = cpu::ForceKernelPathForTesting(p);
    const double t = TimeMean(min_seconds, [&] { call(false); });
    cpu::ForceKernelPathForTesting(old);
    const std::string k(cpu::KernelPathName(p));
    j[k + "_us"] = t * 1e6;
    j[k + "_speedup"] = ref / t;
    j[k + "_weight_gbps"] = static_cast<double>(bytes) / t / 1e9;
    j[k + "_gflops"] = 2.0 * static_cast<double>(rows * in * out) / t / 1e9;
  }
  return j;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunKernelMicroBenchmarks(const KernelMicroOptions& o) {
  VISMOE_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::Load(o.model_path));
  ThreadPool pool(o.num_threads);
  nlohmann::json report = {{"threads", pool.size()},
                           {"detected_path", std::string(cpu::KernelPathName(cpu::DetectedKernelPath()))},
                           {"read_bandwidth_gbps", ReadBandwidth(&pool)}};
  std::mt19937 rng(0);
  nlohmann::json kernels = nlohmann::json::array();
  for (const std::string& name : o.dtypes) {
    absl::StatusOr<DType> parsed = name == "MXFP4" ? DType::kMxFp4 : ParseDType(name);
    VISMOE_RETURN_IF_ERROR(parsed.status());
    const DType d = *parsed;
    const bool scaled = d == DType::kF8E4M3 || d == DType::kMxFp4;
    for (const Shape2& s : DecoderShapes(config.text)) {
      // Block-scaled weights are [out, in] only; MXFP4 needs whole blocks of 32.
      if (scaled && (s.transposed || (d == DType::kMxFp4 && s.cols_or_out % 32 != 0))) continue;
      for (int64_t rows : {int64_t{1}, int64_t{o.prefill_rows}}) {
        kernels.push_back(BenchOne(s, d, rows, o.min_seconds, &pool, rng));
        std::fprintf(stderr, "%s\n", kernels.back().dump().c_str());
      }
    }
  }
  report["kernels"] = std::move(kernels);
  return report;
}

}  // namespace vismoe::bench
