// Helpers shared by the *_gpu_test.cc files: skip without a device, random
// bf16 data, device round trips, and a tolerance check that names the worst
// element. Only meaningful when the CUDA backend is built (VISMOE_HAVE_CUDA).
#ifndef VISMOE_TESTS_ENGINE_OPS_CUDA_GPU_TEST_UTIL_H_
#define VISMOE_TESTS_ENGINE_OPS_CUDA_GPU_TEST_UTIL_H_

#ifdef VISMOE_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/device/cuda/device.h"
#include "gtest/gtest.h"

namespace vismoe::cuda::testing {

// GTEST_SKIPs the calling test when no usable CUDA device is present.
#define VISMOE_SKIP_WITHOUT_GPU()                                          \
  do {                                                                     \
    const absl::StatusOr<::vismoe::cuda::DeviceInfo> vismoe_dev_ =         \
        ::vismoe::cuda::ProbeCudaDevice();                                 \
    if (!vismoe_dev_.ok()) GTEST_SKIP() << vismoe_dev_.status().message(); \
  } while (0)

// Fails the calling test (and returns) when `expr`, an absl::Status, is not OK.
#define ASSERT_OK(expr)              \
  do {                               \
    const absl::Status st_ = (expr); \
    ASSERT_TRUE(st_.ok()) << st_;    \
  } while (0)

// Random bf16 values, uniform in [-scale, scale], as raw bits.
inline std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<uint16_t> out(n);
  for (auto& v : out) v = FloatToBf16(dist(rng));
  return out;
}

inline std::vector<float> ToF32(const std::vector<uint16_t>& bf16) {
  std::vector<float> out(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) out[i] = Bf16ToFloat(bf16[i]);
  return out;
}

inline TensorView Bf16View(const std::vector<uint16_t>& v, Shape shape) {
  return TensorView{v.data(), DType::kBF16, std::move(shape)};
}

// A device copy of a host vector, and back. Test failures abort the test via ASSERT in callers.
template <typename T>
absl::StatusOr<DeviceBuffer> Upload(const std::vector<T>& host) {
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(host.size() * sizeof(T) + 16);
  if (!buf.ok()) return buf.status();
  absl::Status st = CopyToDevice(buf->data(), host.data(), host.size() * sizeof(T));
  if (!st.ok()) return st;
  return buf;
}

template <typename T>
absl::StatusOr<std::vector<T>> Download(const DeviceBuffer& buf, size_t count) {
  std::vector<T> out(count);
  absl::Status st = SynchronizeDevice();
  if (!st.ok()) return st;
  st = CopyToHost(out.data(), buf.data(), count * sizeof(T));
  if (!st.ok()) return st;
  return out;
}

// Expects |got[i] - ref[i]| <= abs_tol + rel_tol * |ref[i]| for all i and
// reports the worst element.
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref, float abs_tol,
                        float rel_tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t worst = 0;
  double worst_excess = -1e30;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = abs_tol + rel_tol * std::fabs(ref[i]);
    const double excess = std::fabs(static_cast<double>(got[i]) - ref[i]) - tol;
    if (!(excess <= 0)) ++bad;  // NaN counts as bad
    if (!(excess <= worst_excess)) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size()
                    << " elements out of tolerance; worst at " << worst << ": got " << got[worst]
                    << " want " << ref[worst];
}

inline float Rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return v.empty() ? 0.0f : static_cast<float>(std::sqrt(s / static_cast<double>(v.size())));
}

// The largest |v[i]| (0 for empty): the scale of bf16 tolerances on model outputs.
inline float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace vismoe::cuda::testing

#endif  // VISMOE_HAVE_CUDA
#endif  // VISMOE_TESTS_ENGINE_OPS_CUDA_GPU_TEST_UTIL_H_
