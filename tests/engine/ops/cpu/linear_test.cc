// cpu::Linear and cpu::LinearTransposed on every kernel path this machine can
// run (the portable one always, AVX2 and AVX-512 where present) against the fp32 reference
// and a double-precision sum, over odd shapes and every weight dtype; and the
// property batched decode relies on: an output row's bits do not depend on how
// many rows share the call, where the row sits, or how many threads split it.
#include "engine/ops/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/cpu/kernel_dispatch.h"
#include "gtest/gtest.h"
#include "tests/testing/reference_math.h"
#include "tests/testing/scoped_kernel_path.h"

namespace vismoe::cpu {
namespace {

using testing::Pattern;

using ScopedPath = testing::ScopedKernelPath;

// A weight tensor in `dtype` holding `values` (rounded to the dtype once; the
// kernels then see those rounded values exactly).
struct Weights {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  TensorView view;
};

Weights MakeWeights(DType dtype, const std::vector<float>& values, Shape shape) {
  Weights w;
  if (dtype == DType::kF32) {
    w.f32 = values;
    w.view = {w.f32.data(), dtype, std::move(shape)};
    return w;
  }
  for (float v : values) w.half.push_back(dtype == DType::kBF16 ? FloatToBf16(v) : FloatToF16(v));
  w.view = {w.half.data(), dtype, std::move(shape)};
  return w;
}

// |fast - reference| is at most the sum of two recursive-summation error
// bounds, gamma_K * sum |x_i w_i| each (Higham 3.1); the weights are exact
// after widening, so the bound is the same for every dtype.
double Bound(double abs_sum, int64_t k) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = (k + 1) * u / (1 - (k + 1) * u);
  return 2 * gamma * abs_sum + 1e-30;
}

struct Case {
  int64_t n, in, out;
  bool transposed, bias;
  DType dtype;
};

std::string Name(const Case& c, KernelPath p) {
  std::ostringstream s;
  s << KernelPathName(p) << " " << DTypeName(c.dtype) << (c.transposed ? " T" : "")
    << (c.bias ? " bias" : "") << " n=" << c.n << " in=" << c.in << " out=" << c.out;
  return s.str();
}

// Runs one case on the active path and checks it against both references.
void CheckCase(const Case& c, ThreadPool* pool, const std::string& what) {
  const std::vector<float> x = Pattern(c.n * c.in, c.in * 7 + c.out, 1.0f);
  const std::vector<float> wv = Pattern(c.in * c.out, c.out * 13 + c.n, 0.5f);
  const Shape shape = c.transposed ? Shape{c.in, c.out} : Shape{c.out, c.in};
  const Weights w = MakeWeights(c.dtype, wv, shape);
  const Weights b = MakeWeights(c.dtype, Pattern(c.out, 99, 0.25f), {c.out});
  std::vector<float> fast(c.n * c.out, NAN), ref(c.n * c.out, NAN);
  if (c.transposed) {
    LinearTransposed(pool, x.data(), c.n, c.in, w.view, fast.data());
    LinearTransposedReference(pool, x.data(), c.n, c.in, w.view, ref.data());
  } else {
    const TensorView* bias = c.bias ? &b.view : nullptr;
    Linear(pool, x.data(), c.n, c.in, w.view, bias, fast.data());
    LinearReference(pool, x.data(), c.n, c.in, w.view, bias, ref.data());
  }
  const std::vector<double> wd = testing::AsDouble(w.view);
  const std::vector<double> bd = testing::AsDouble(b.view);
  int bad = 0;
  for (int64_t t = 0; t < c.n; ++t) {
    for (int64_t o = 0; o < c.out; ++o) {
      double exact = c.bias && !c.transposed ? bd[o] : 0.0, abs_sum = std::fabs(exact);
      for (int64_t i = 0; i < c.in; ++i) {
        const double wi = c.transposed ? wd[i * c.out + o] : wd[o * c.in + i];
        exact += x[t * c.in + i] * wi;
        abs_sum += std::fabs(x[t * c.in + i] * wi);
      }
      const size_t at = t * c.out + o;
      const double tol = Bound(abs_sum, c.in + 1);
      if (bad < 5 &&
          !(std::fabs(fast[at] - ref[at]) <= tol && std::fabs(fast[at] - exact) <= tol)) {
        ++bad;
        ADD_FAILURE() << what << " at t=" << t << " o=" << o << ": fast " << fast[at] << ", ref "
                      << ref[at] << ", exact " << exact << ", tol " << tol;
      }
    }
  }
}

TEST(LinearTest, EveryPathMatchesTheReferenceOverOddShapes) {
  ThreadPool pool(3);
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    ASSERT_EQ(ActiveKernelPath(), path);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t n : {1, 2, 3, 4, 5, 9}) {
        for (int64_t in : {1, 7, 8, 9, 17, 100}) {
          for (int64_t out : {1, 5, 8, 13, 67, 130}) {
            for (int variant = 0; variant < 3; ++variant) {
              const Case c{n, in, out, variant == 2, variant == 1, dtype};
              CheckCase(c, variant == 0 ? nullptr : &pool, Name(c, path));
            }
          }
        }
      }
    }
  }
}

TEST(LinearTest, DecoderSizedShapesMatchTheReference) {
  ThreadPool pool(2);
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (const Case& c :
           {Case{1, 512, 768, false, false, dtype}, Case{1, 384, 1024, true, false, dtype},
            Case{33, 256, 300, false, true, dtype}, Case{33, 300, 256, true, false, dtype}}) {
        CheckCase(c, &pool, Name(c, path));
      }
    }
  }
}

// y for rows [begin, end) of x alone, computed with `pool`.
std::vector<float> RunRows(bool transposed, const std::vector<float>& x, int64_t begin, int64_t end,
                           int64_t in, const TensorView& w, const TensorView* bias,
                           ThreadPool* pool) {
  const int64_t out = transposed ? w.dim(1) : w.dim(0);
  std::vector<float> y((end - begin) * out);
  if (transposed) {
    LinearTransposed(pool, x.data() + begin * in, end - begin, in, w, y.data());
  } else {
    Linear(pool, x.data() + begin * in, end - begin, in, w, bias, y.data());
  }
  return y;
}

TEST(LinearTest, ARowsBitsDependOnNeitherBatchNorPlaceNorThreads) {
  ThreadPool pool2(2), pool3(3);
  constexpr int64_t kRows = 11;
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (bool transposed : {false, true}) {
        for (auto [in, out] : {std::pair<int64_t, int64_t>{37, 70}, {256, 203}}) {
          const std::vector<float> x = Pattern(kRows * in, in, 1.0f);
          const Shape shape = transposed ? Shape{in, out} : Shape{out, in};
          const Weights w = MakeWeights(dtype, Pattern(in * out, out, 0.5f), shape);
          const Weights b = MakeWeights(dtype, Pattern(out, 5, 0.5f), {out});
          const TensorView* bias = transposed ? nullptr : &b.view;
          const std::vector<float> all = RunRows(transposed, x, 0, kRows, in, w.view, bias, &pool3);
          std::ostringstream what_s;
          what_s << KernelPathName(path) << " " << DTypeName(dtype) << (transposed ? " T" : "")
                 << " in=" << in << " out=" << out;
          const std::string what = what_s.str();
          for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1},
                                    {3, 4},
                                    {10, 11},
                                    {1, 3},
                                    {2, 7},
                                    {5, 10},
                                    {0, 4},
                                    {4, 9}}) {
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
              const std::vector<float> part =
                  RunRows(transposed, x, begin, end, in, w.view, bias, pool);
              EXPECT_EQ(
                  std::memcmp(part.data(), all.data() + begin * out, part.size() * sizeof(float)),
                  0)
                  << what << ": rows [" << begin << ", " << end << ") alone differ from the batch";
            }
          }
        }
      }
    }
  }
}

// x = 1 over a one-column weight: y is each weight value exactly, so every
// BF16 and F16 bit pattern (subnormals, infinities, NaN) must widen as
// Bf16ToFloat / F16ToFloat do, on every path and in both layouts.
TEST(LinearTest, EveryHalfBitPatternWidensExactly) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  const float one = 1.0f;
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      for (bool transposed : {false, true}) {
        const TensorView w{all.data(), dtype, transposed ? Shape{1, 65536} : Shape{65536, 1}};
        std::vector<float> y(65536);
        if (transposed) {
          LinearTransposed(nullptr, &one, 1, 1, w, y.data());
        } else {
          Linear(nullptr, &one, 1, 1, w, nullptr, y.data());
        }
        int bad = 0;
        for (uint32_t h = 0; h < 65536 && bad < 5; ++h) {
          const auto bits = static_cast<uint16_t>(h);
          const float want = dtype == DType::kBF16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
          if (std::isnan(want) ? !std::isnan(y[h]) : y[h] != want) {
            ++bad;
            ADD_FAILURE() << KernelPathName(path) << " " << DTypeName(dtype)
                          << (transposed ? " T" : "") << " 0x" << std::hex << h << ": got " << y[h]
                          << ", want " << want;
          }
        }
      }
    }
  }
}

// A block-quantised e4m3 weight [out, in] with its scales, and the same
// weight dequantised to fp32 (each element e4m3 value * block scale, one
// rounding): what the kernels must compute with.
struct E4m3Weights {
  std::vector<uint8_t> q;
  std::vector<float> scale_f32;
  std::vector<uint16_t> scale_bf16;
  std::vector<float> dequantised;
  TensorView view, dense;
};

E4m3Weights MakeE4m3(int64_t out, int64_t in, int64_t rows, int64_t cols, DType scale_dtype,
                     int64_t salt) {
  E4m3Weights w;
  const std::vector<float> values = Pattern(out * in, salt, 400.0f);
  for (float v : values) w.q.push_back(FloatToE4m3(v));
  const int64_t sr = CeilDiv(out, rows), sc = CeilDiv(in, cols);
  const std::vector<float> scales = Pattern(sr * sc, salt + 1, 1.0f / 512);
  for (float s : scales) {
    const float positive = std::fabs(s) + 1.0f / 4096;
    w.scale_bf16.push_back(FloatToBf16(positive));
    w.scale_f32.push_back(scale_dtype == DType::kBF16 ? Bf16ToFloat(w.scale_bf16.back())
                                                      : positive);
  }
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      w.dequantised.push_back(E4m3ToFloat(w.q[o * in + i]) *
                              w.scale_f32[(o / rows) * sc + i / cols]);
    }
  }
  const void* sdata = scale_dtype == DType::kBF16 ? static_cast<const void*>(w.scale_bf16.data())
                                                  : w.scale_f32.data();
  w.view = {w.q.data(), DType::kF8E4M3, {out, in}, {sdata, scale_dtype, rows, cols}};
  w.dense = {w.dequantised.data(), DType::kF32, {out, in}};
  return w;
}

// A block-scaled weight `w` and its dequantised fp32 copy `dense` give the
// same bits, fast kernel and reference, for the x rows of `n` (the pool used
// for n > 2, so the tiles and the split run too).
void ExpectBitsOfDense(const TensorView& w, const TensorView& dense, int64_t n, int64_t in,
                       ThreadPool* pool, const std::string& what) {
  const int64_t out = w.dim(0);
  const std::vector<float> bias = Pattern(out, 7, 0.25f);
  const TensorView bias_view{bias.data(), DType::kF32, {out}};
  const std::vector<float> x = Pattern(n * in, in + n, 1.0f);
  std::vector<float> got(n * out), want(n * out), ref(n * out), ref_want(n * out);
  Linear(n > 2 ? pool : nullptr, x.data(), n, in, w, &bias_view, got.data());
  Linear(nullptr, x.data(), n, in, dense, &bias_view, want.data());
  LinearReference(nullptr, x.data(), n, in, w, nullptr, ref.data());
  LinearReference(nullptr, x.data(), n, in, dense, nullptr, ref_want.data());
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
  ASSERT_EQ(std::memcmp(ref.data(), ref_want.data(), ref.size() * sizeof(float)), 0)
      << what << " (reference)";
}

// Dequantising as the weights are read computes exactly the products and
// sums of the dequantised fp32 weight: bit-identical outputs on each path,
// over tails, partial blocks, both scale dtypes and batch sizes.
TEST(LinearTest, E4m3WeightsGiveTheBitsOfTheirDequantisedWeights) {
  ThreadPool pool(2);
  struct Block {
    int64_t rows, cols;
  };
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    for (DType scale_dtype : {DType::kF32, DType::kBF16}) {
      for (Block b : {Block{1, 16}, Block{4, 32}, Block{3, 48}, Block{128, 128}}) {
        for (int64_t in : {1, 16, 40, 100, 256, 300}) {
          for (int64_t out : {1, 5, 13, 67}) {
            const E4m3Weights w = MakeE4m3(out, in, b.rows, b.cols, scale_dtype, in * 31 + out);
            // n >= 8 widens the weights once per block of rows (prefill).
            for (int64_t n : {1, 2, 4, 5, 8, 13}) {
              ASSERT_NO_FATAL_FAILURE(ExpectBitsOfDense(
                  w.view, w.dense, n, in, &pool,
                  absl::StrCat(std::string(KernelPathName(path)), " scale ",
                               std::string(DTypeName(scale_dtype)), " block ", b.rows, "x", b.cols,
                               " n=", n, " in=", in, " out=", out)));
            }
          }
        }
      }
    }
  }
}

// DequantizeF8 gives the dequantised fp32 weight Linear reads, bit for bit,
// over partial blocks and both scale dtypes (DeepSeek's kv_b_proj is sliced
// per head off its blocks through it).
TEST(LinearTest, DequantizeF8GivesTheWeightsLinearReads) {
  for (DType scale_dtype : {DType::kF32, DType::kBF16}) {
    const E4m3Weights w = MakeE4m3(67, 40, 32, 16, scale_dtype, 5);
    const std::vector<float> got = DequantizeF8(w.view);
    ASSERT_EQ(got.size(), w.dequantised.size());
    EXPECT_EQ(std::memcmp(got.data(), w.dequantised.data(), got.size() * sizeof(float)), 0)
        << DTypeName(scale_dtype);
  }
}

// x = 1 over a one-column weight with scale 1: y is each e4m3 value exactly,
// the NaN codes 0x7f / 0xff NaN (so broken expert bytes reach the logits'
// finiteness check instead of becoming numbers).
TEST(LinearTest, EveryE4m3BitPatternWidensExactly) {
  std::vector<uint8_t> all(256);
  for (uint32_t v = 0; v < 256; ++v) all[v] = static_cast<uint8_t>(v);
  const std::vector<float> ones(256, 1.0f);
  const float one = 1.0f;
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    const TensorView w{all.data(), DType::kF8E4M3, {256, 1}, {ones.data(), DType::kF32, 1, 16}};
    std::vector<float> y(256);
    Linear(nullptr, &one, 1, 1, w, nullptr, y.data());
    for (uint32_t v = 0; v < 256; ++v) {
      const float want = E4m3ToFloat(static_cast<uint8_t>(v));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[v])) << KernelPathName(path) << " 0x" << std::hex << v;
      } else {
        EXPECT_EQ(y[v], want) << KernelPathName(path) << " 0x" << std::hex << v;
      }
    }
  }
}

// An MXFP4 weight [out, in] from a pattern of bytes (every code, both
// nibbles), e8m0 scales per 32 inputs spread over 2^-9 .. 2^4, and the same
// weight decoded to fp32 (exact: an e2m1 value times a power of two).
struct Mxfp4Weights {
  std::vector<uint8_t> blocks;
  std::vector<uint8_t> scales;
  std::vector<float> decoded;
  TensorView view, dense;
};

Mxfp4Weights MakeMxfp4(int64_t out, int64_t in, uint32_t salt) {
  Mxfp4Weights w;
  uint32_t state = salt * 2654435761u + 1;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 24;
  };
  for (int64_t k = 0; k < out * in / 2; ++k) w.blocks.push_back(static_cast<uint8_t>(next()));
  for (int64_t k = 0; k < out * in / 32; ++k) w.scales.push_back(118 + next() % 14);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const int64_t k = o * in + i;
      w.decoded.push_back(E2m1ToFloat(w.blocks[k / 2] >> (4 * (k % 2))) *
                          E8m0ToFloat(w.scales[k / 32]));
    }
  }
  w.view = {w.blocks.data(), DType::kMxFp4, {out, in}, {w.scales.data(), DType::kE8M0, 1, 32}};
  w.dense = {w.decoded.data(), DType::kF32, {out, in}};
  return w;
}

// Decoding MXFP4 as the weights are read computes exactly the products and
// sums of the decoded fp32 weight: bit-identical outputs on each path (the
// nibble order, the sign, the scale's block), batch sizes and row counts that
// exercise every tile of the rows kernels and prefill's widened weights.
TEST(LinearTest, Mxfp4WeightsGiveTheBitsOfTheirDecodedWeights) {
  ThreadPool pool(2);
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    for (int64_t in : {32, 64, 96, 288}) {
      for (int64_t out : {1, 5, 13, 67}) {
        const Mxfp4Weights w = MakeMxfp4(out, in, static_cast<uint32_t>(in * 31 + out));
        for (int64_t n : {1, 2, 4, 5, 8, 13}) {
          ASSERT_NO_FATAL_FAILURE(ExpectBitsOfDense(
              w.view, w.dense, n, in, &pool,
              absl::StrCat(std::string(KernelPathName(path)), " n=", n, " in=", in, " out=", out)));
        }
      }
    }
  }
}

// x = e_j over rows that each hold one code at input j (the other nibble of
// its byte zero) and one scale byte: y is every e2m1 value at both nibble
// positions, times every finite e8m0 scale (2^-127 .. 2^127) exactly.
TEST(LinearTest, EveryMxfp4CodeAndScaleDecodesExactly) {
  constexpr int64_t kIn = 32;
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    for (int64_t j : {0, 1, 30, 31}) {
      std::vector<float> x(kIn, 0.0f);
      x[j] = 1.0f;
      std::vector<uint8_t> blocks, scales;
      std::vector<float> want;
      for (int code = 0; code < 16; ++code) {
        for (int scale = 0; scale < 255; scale += 7) {
          std::vector<uint8_t> row(kIn / 2, 0);
          row[j / 2] = static_cast<uint8_t>(code << (4 * (j % 2)));
          blocks.insert(blocks.end(), row.begin(), row.end());
          scales.push_back(static_cast<uint8_t>(scale));
          want.push_back(E2m1ToFloat(static_cast<uint8_t>(code)) * std::ldexp(1.0f, scale - 127));
        }
      }
      const int64_t out = static_cast<int64_t>(scales.size());
      const TensorView w{
          blocks.data(), DType::kMxFp4, {out, kIn}, {scales.data(), DType::kE8M0, 1, 32}};
      std::vector<float> y(out);
      Linear(nullptr, x.data(), 1, kIn, w, nullptr, y.data());
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(y[o], want[o]) << KernelPathName(path) << " input " << j << " row " << o;
      }
    }
  }
}

TEST(KernelDispatchTest, ForcingAPathAndReturningToTheDetectedOne) {
  const KernelPath detected = DetectedKernelPath();
  EXPECT_EQ(ActiveKernelPath(), detected);
  EXPECT_EQ(AvailableKernelPaths().front(), KernelPath::kPortable);
  EXPECT_EQ(AvailableKernelPaths().back(), detected);
  EXPECT_EQ(ForceKernelPathForTesting(KernelPath::kPortable), std::nullopt);
  EXPECT_EQ(ActiveKernelPath(), KernelPath::kPortable);
  EXPECT_EQ(ForceKernelPathForTesting(std::nullopt), KernelPath::kPortable);
  EXPECT_EQ(ActiveKernelPath(), detected);
  if (detected != KernelPath::kAvx512) {  // a path past the detected one is ignored
    EXPECT_EQ(ForceKernelPathForTesting(KernelPath::kAvx512), std::nullopt);
    EXPECT_EQ(ActiveKernelPath(), detected);
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const char* env = std::getenv("VISMOE_CPU_KERNEL_PATH");
  const std::string cap = env != nullptr ? env : "";
  const KernelPath hardware = avx512 ? KernelPath::kAvx512
                              : avx2 ? KernelPath::kAvx2
                                     : KernelPath::kPortable;
  const KernelPath want = cap == "portable" ? KernelPath::kPortable
                          : cap == "avx2"   ? std::min(hardware, KernelPath::kAvx2)
                                            : hardware;
  EXPECT_EQ(detected, want) << "VISMOE_CPU_KERNEL_PATH=" << cap;
#endif
}

// The AVX-512 rows kernels only run where the CPU has AVX-512 (the tests above
// cover them through AvailableKernelPaths()); elsewhere this says so.
TEST(KernelDispatchTest, Avx512PathRunsWhereTheCpuHasIt) {
  if (DetectedKernelPath() != KernelPath::kAvx512) {
    GTEST_SKIP() << "this CPU (or VISMOE_CPU_KERNEL_PATH) gives no AVX-512 path: its kernels "
                    "are not checked here";
  }
  ScopedPath scoped(KernelPath::kAvx512);
  EXPECT_EQ(ActiveKernelPath(), KernelPath::kAvx512);
  // Sixteen lanes: a row of 17 products, each exact, sums to the same value
  // whatever the lane order, and matches the AVX2 path's.
  std::vector<float> x(17, 0.5f);
  const Weights w = MakeWeights(DType::kBF16, std::vector<float>(17 * 2, 2.0f), {2, 17});
  std::vector<float> y(2);
  Linear(nullptr, x.data(), 1, 17, w.view, nullptr, y.data());
  EXPECT_EQ(y[0], 17.0f);
  EXPECT_EQ(y[1], 17.0f);
}

}  // namespace
}  // namespace vismoe::cpu
