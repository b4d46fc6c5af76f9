// Label gpu: cuda::AttentionKeySaliency against the key_saliency output of the
// CPU reference attention (engine/ops/cpu/attention.h) on the same bf16 q/k:
// bidirectional and causal, GQA, fused-qkv row strides, a head_dim that is not
// a power of two (72, as Qwen3-VL's vision tower). Also: the saliency sums to
// 1, two runs are bit-identical (no atomics), bad shapes are InvalidArgument.
// Skips without a device.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(AttentionSaliencyTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/ops/cpu/attention.h"
#include "engine/ops/cuda/attention_saliency.h"
#include "engine/device/cuda/device.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using ::vismoe::cuda::testing::Download;
using ::vismoe::cuda::testing::ExpectClose;
using ::vismoe::cuda::testing::RandomBf16;
using ::vismoe::cuda::testing::ToF32;
using ::vismoe::cuda::testing::Upload;

struct Case {
  int heads;
  int kv_heads;
  int head_dim;
  int64_t nq;
  int64_t nk;
  bool causal;
  int64_t q_pos0;
  bool fused;  // q and k inside fused [q | k | v] rows (the vision tower's layout)
};

// Runs the CUDA kernel and the CPU reference on the same random bf16 rows.
void RunCase(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "heads " << c.heads << " kv " << c.kv_heads << " hd "
                                    << c.head_dim << " nq " << c.nq << " nk " << c.nk << " causal "
                                    << c.causal << " q_pos0 " << c.q_pos0 << " fused " << c.fused);
  const int64_t qd = int64_t{c.heads} * c.head_dim;
  const int64_t kvd = int64_t{c.kv_heads} * c.head_dim;
  // Fused: one buffer of rows [q | k | v] (nq == nk); otherwise dense q and k/v.
  const int64_t q_stride = c.fused ? qd + 2 * kvd : qd;
  const int64_t kv_stride = c.fused ? qd + 2 * kvd : 2 * kvd;  // unfused: rows [k | v]
  const std::vector<uint16_t> q = RandomBf16(static_cast<size_t>(c.nq * q_stride), seed, 2.0f);
  const std::vector<uint16_t> kvbuf =
      c.fused ? q : RandomBf16(static_cast<size_t>(c.nk * kv_stride), seed + 1, 2.0f);
  const int64_t k_off = c.fused ? qd : 0;

  // CPU reference on the widened values.
  const std::vector<float> qf = ToF32(q);
  const std::vector<float> kvf = ToF32(kvbuf);
  cpu::AttentionShape cs;
  cs.num_heads = c.heads;
  cs.num_kv_heads = c.kv_heads;
  cs.head_dim = c.head_dim;
  cs.q_row_stride = q_stride;
  cs.kv_row_stride = kv_stride;
  std::vector<float> out(static_cast<size_t>(c.nq * qd));
  std::vector<float> want(static_cast<size_t>(c.nk), -1.0f);
  cpu::Attention(nullptr, cs, qf.data(), c.nq, kvf.data() + k_off, kvf.data() + k_off + kvd, c.nk,
                 c.causal, c.q_pos0, out.data(), want.data());

  auto dq = Upload(q);
  ASSERT_TRUE(dq.ok()) << dq.status();
  auto dkv = Upload(kvbuf);
  ASSERT_TRUE(dkv.ok()) << dkv.status();
  auto stats = DeviceBuffer::Allocate(
      static_cast<size_t>(AttentionSaliencyScratchFloats(c.heads, c.nq)) * sizeof(float));
  ASSERT_TRUE(stats.ok()) << stats.status();
  auto sal = DeviceBuffer::Allocate(static_cast<size_t>(c.nk) * sizeof(float));
  ASSERT_TRUE(sal.ok()) << sal.status();
  AttentionShape shape;
  shape.num_heads = c.heads;
  shape.num_kv_heads = c.kv_heads;
  shape.head_dim = c.head_dim;
  shape.q_row_stride = q_stride;
  shape.kv_row_stride = kv_stride;
  const Bf16* dk = dkv->as<Bf16>() + k_off;
  ASSERT_TRUE(AttentionKeySaliency(shape, dq->as<Bf16>(), c.nq, dk, c.nk, c.causal, c.q_pos0,
                                   stats->as<float>(), sal->as<float>(), nullptr)
                  .ok());
  auto got = Download<float>(*sal, static_cast<size_t>(c.nk));
  ASSERT_TRUE(got.ok()) << got.status();
  // Same fp32 scores; only the summation orders differ.
  ExpectClose(*got, want, 1e-6f, 1e-4f, "key saliency");
  double sum = 0;
  for (float v : *got) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-4);

  // Deterministic: a second run is bit-identical.
  ASSERT_TRUE(AttentionKeySaliency(shape, dq->as<Bf16>(), c.nq, dk, c.nk, c.causal, c.q_pos0,
                                   stats->as<float>(), sal->as<float>(), nullptr)
                  .ok());
  auto again = Download<float>(*sal, static_cast<size_t>(c.nk));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(std::memcmp(got->data(), again->data(), got->size() * sizeof(float)), 0)
      << "two runs differ";
}

TEST(AttentionSaliencyTest, BidirectionalMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  RunCase({4, 4, 16, 24, 24, false, 0, true}, 1);      // the tiny vision tower's frame
  RunCase({16, 16, 72, 196, 196, false, 0, true}, 2);  // Qwen3-VL's head shape
  RunCase({4, 2, 32, 37, 53, false, 0, false}, 3);     // GQA, nq != nk
  RunCase({2, 2, 8, 1, 5, false, 0, false}, 4);        // one query, fewer keys than a warp
}

TEST(AttentionSaliencyTest, CausalMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  RunCase({4, 2, 32, 37, 53, true, 10, false}, 5);  // keys 47..52 follow the last query: 0
  RunCase({4, 4, 16, 40, 40, true, 0, true}, 6);
  RunCase({4, 2, 64, 3, 100, true, 60, false}, 7);  // decode-like: few queries, many keys
}

TEST(AttentionSaliencyTest, BadShapesAreInvalidArgument) {
  VISMOE_SKIP_WITHOUT_GPU();
  auto buf = DeviceBuffer::Allocate(1 << 16);
  ASSERT_TRUE(buf.ok()) << buf.status();
  const Bf16* p = buf->as<Bf16>();
  float* f = buf->as<float>();
  AttentionShape ok_shape{4, 4, 16, 0, 0};
  AttentionShape bad_group{4, 3, 16, 0, 0};
  AttentionShape big_head{1, 1, 512, 0, 0};
  auto code = [&](const AttentionShape& s, int64_t nq, int64_t nk, int64_t q_pos0) {
    return AttentionKeySaliency(s, p, nq, p, nk, q_pos0 > 0, q_pos0, f, f, nullptr).code();
  };
  EXPECT_EQ(code(ok_shape, 0, 4, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ok_shape, 4, 0, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(bad_group, 4, 4, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(big_head, 4, 4, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ok_shape, 4, 4, -1), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SynchronizeDevice().ok());
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
