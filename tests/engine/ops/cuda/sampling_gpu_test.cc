// Device token selection: greedy equals the CPU Sampler's argmax; seeded
// sampling is deterministic per (seed, step, row), honours top_k / top_p,
// and draws with the softmax frequencies.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(CudaSamplingGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "absl/types/span.h"
#include "engine/ops/cuda/sampling.h"
#include "engine/runtime/sampler.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using testing::Download;
using testing::Upload;

// Runs on any machine: the host copy of the device RNG.
TEST(CudaSamplingTest, UniformIsInRangeAndCounterBased) {
  std::set<float> seen;
  for (uint64_t row = 0; row < 1000; ++row) {
    const float u = SamplingUniform(42, 7, row);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
    EXPECT_EQ(u, SamplingUniform(42, 7, row));
    seen.insert(u);
  }
  EXPECT_GT(seen.size(), 990u);
  EXPECT_NE(SamplingUniform(42, 7, 0), SamplingUniform(43, 7, 0));
  EXPECT_NE(SamplingUniform(42, 7, 0), SamplingUniform(42, 8, 0));
}

TEST(CudaSamplingTest, RejectsBadParams) {
  DeviceSamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(SampleRows(nullptr, 1, 10, p, 0, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  p.temperature = 1.0f;
  p.top_p = 0.0f;
  EXPECT_EQ(SampleRows(nullptr, 1, 10, p, 0, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  p.top_p = 1.0f;
  p.top_k = -1;
  EXPECT_EQ(SampleRows(nullptr, 1, 10, p, 0, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

std::vector<float> RandomLogits(int64_t n, int64_t vocab, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n * vocab);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(CudaSamplingGpuTest, GreedyEqualsCpuArgmaxIncludingTies) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 5, kVocab = 151936;  // Qwen3-VL vocabulary
  std::vector<float> logits = RandomLogits(kN, kVocab, 50, 3.0f);
  // Row 1: a tie for the maximum; the lowest id must win.
  logits[1 * kVocab + 90000] = 100.0f;
  logits[1 * kVocab + 777] = 100.0f;
  auto dl = Upload(logits);
  auto dout = DeviceBuffer::Allocate(kN * 4);
  ASSERT_TRUE(dl.ok() && dout.ok());
  ASSERT_OK(ArgmaxRows(dl->as<float>(), kN, kVocab, dout->as<int32_t>(), nullptr));
  auto got = Download<int32_t>(*dout, kN);
  ASSERT_TRUE(got.ok());
  for (int64_t r = 0; r < kN; ++r) {
    const int want = Sampler::Argmax(absl::MakeConstSpan(logits.data() + r * kVocab, kVocab));
    EXPECT_EQ((*got)[r], want) << "row " << r;
  }
  EXPECT_EQ((*got)[1], 777);
}

std::vector<int32_t> Sample(const std::vector<float>& logits, int64_t n, int64_t vocab,
                            const DeviceSamplingParams& p, uint64_t seed, uint64_t step) {
  auto dl = Upload(logits);
  auto dout = DeviceBuffer::Allocate(n * 4);
  EXPECT_TRUE(dl.ok() && dout.ok());
  if (!dl.ok() || !dout.ok()) return {};
  const absl::Status st =
      SampleRows(dl->as<float>(), n, vocab, p, seed, step, dout->as<int32_t>(), nullptr);
  EXPECT_TRUE(st.ok()) << st;
  auto got = Download<int32_t>(*dout, n);
  EXPECT_TRUE(got.ok());
  return got.ok() ? *got : std::vector<int32_t>{};
}

TEST(CudaSamplingGpuTest, SeededSamplingIsDeterministic) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 64, kVocab = 32000;
  const std::vector<float> logits = RandomLogits(kN, kVocab, 51, 1.0f);
  DeviceSamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 50;
  p.top_p = 0.9f;
  const auto a = Sample(logits, kN, kVocab, p, 1234, 3);
  const auto b = Sample(logits, kN, kVocab, p, 1234, 3);
  const auto c = Sample(logits, kN, kVocab, p, 999, 3);
  ASSERT_EQ(a.size(), static_cast<size_t>(kN));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);  // 64 rows over >1 token each: equal by chance is negligible
  for (int64_t r = 0; r < kN; ++r) {
    // Every pick is within the row's top 50 logits.
    const float* row = logits.data() + r * kVocab;
    int greater = 0;
    for (int64_t i = 0; i < kVocab; ++i) greater += row[i] > row[a[r]];
    EXPECT_LT(greater, 50) << "row " << r;
  }
}

TEST(CudaSamplingGpuTest, TopKOneAndTinyTopPAreGreedy) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 16, kVocab = 5000;
  const std::vector<float> logits = RandomLogits(kN, kVocab, 52, 2.0f);
  DeviceSamplingParams k1;
  k1.top_k = 1;
  DeviceSamplingParams p0;
  p0.top_p = 1e-6f;
  const auto a = Sample(logits, kN, kVocab, k1, 5, 0);
  const auto b = Sample(logits, kN, kVocab, p0, 6, 0);
  ASSERT_EQ(a.size(), static_cast<size_t>(kN));
  ASSERT_EQ(b.size(), static_cast<size_t>(kN));
  for (int64_t r = 0; r < kN; ++r) {
    const int want = Sampler::Argmax(absl::MakeConstSpan(logits.data() + r * kVocab, kVocab));
    EXPECT_EQ(a[r], want);
    EXPECT_EQ(b[r], want);
  }
}

// The same 8-token row repeated kN times (each row draws its own number):
// frequencies within 5 standard deviations of the filtered softmax.
void CheckFrequencies(const DeviceSamplingParams& p, const std::vector<double>& want) {
  constexpr int64_t kN = 20000, kVocab = 8;
  const std::vector<float> row = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -0.5f, 0.25f};
  std::vector<float> logits;
  for (int64_t r = 0; r < kN; ++r) logits.insert(logits.end(), row.begin(), row.end());
  const auto got = Sample(logits, kN, kVocab, p, 77, 0);
  ASSERT_EQ(got.size(), static_cast<size_t>(kN));
  std::vector<int> count(kVocab, 0);
  for (int32_t t : got) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kVocab);
    ++count[t];
  }
  for (int t = 0; t < kVocab; ++t) {
    const double f = static_cast<double>(count[t]) / kN;
    const double sigma = std::sqrt(want[t] * (1 - want[t]) / kN);
    if (want[t] == 0.0) {
      EXPECT_EQ(count[t], 0) << "token " << t;
    } else {
      EXPECT_NEAR(f, want[t], 5 * sigma + 1e-9) << "token " << t;
    }
  }
}

std::vector<double> Softmax(const std::vector<double>& l, const std::vector<bool>& keep) {
  std::vector<double> p(l.size(), 0.0);
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += keep[i] ? std::exp(l[i]) : 0.0;
  for (size_t i = 0; i < l.size(); ++i) p[i] = keep[i] ? std::exp(l[i]) / z : 0.0;
  return p;
}

TEST(CudaSamplingGpuTest, FrequenciesFollowFilteredSoftmax) {
  VISMOE_SKIP_WITHOUT_GPU();
  const std::vector<double> l = {1.0, 0.5, 2.0, -1.0, 0.0, 1.5, -0.5, 0.25};
  DeviceSamplingParams plain;
  CheckFrequencies(plain, Softmax(l, std::vector<bool>(8, true)));
  // top_k = 3 keeps tokens 2, 5, 0 (logits 2.0, 1.5, 1.0).
  DeviceSamplingParams k3;
  k3.top_k = 3;
  CheckFrequencies(k3, Softmax(l, {true, false, true, false, false, true, false, false}));
  // Temperature 0.5 doubles the logits.
  DeviceSamplingParams t;
  t.temperature = 0.5f;
  std::vector<double> l2 = l;
  for (double& v : l2) v *= 2;
  CheckFrequencies(t, Softmax(l2, std::vector<bool>(8, true)));
  // top_p = 0.6: softmax masses sorted are ~.34 (2), .21 (5), .13 (0), ...
  // so the smallest prefix reaching 0.6 is {2, 5, 0}.
  const std::vector<double> full = Softmax(l, std::vector<bool>(8, true));
  ASSERT_LT(full[2] + full[5], 0.6);
  ASSERT_GE(full[2] + full[5] + full[0], 0.6);
  DeviceSamplingParams tp;
  tp.top_p = 0.6f;
  CheckFrequencies(tp, Softmax(l, {true, false, true, false, false, true, false, false}));
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
