// Device detection, error mapping, RAII resources and the DeviceArena.
// Detection, error mapping and arena arithmetic run on any machine built with
// CUDA; the allocation tests need a device and skip without one.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(CudaDeviceTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/device/cuda/device.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

TEST(CudaDeviceTest, ProbeGivesInfoOrAClearStatus) {
  absl::StatusOr<DeviceInfo> info = ProbeCudaDevice();
  if (!info.ok()) {
    // What the engine logs before falling back to the CPU backend.
    EXPECT_TRUE(info.status().code() == absl::StatusCode::kUnavailable ||
                info.status().code() == absl::StatusCode::kFailedPrecondition)
        << info.status();
    if (info.status().code() == absl::StatusCode::kUnavailable) {
      EXPECT_TRUE(absl::StartsWith(info.status().message(), "no CUDA device: ")) << info.status();
    }
    return;
  }
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->sm_count, 0);
  EXPECT_GE(info->compute_major, 8);
  EXPECT_GT(info->total_memory_bytes, 0u);
  EXPECT_LE(info->free_memory_bytes, info->total_memory_bytes);
  EXPECT_TRUE(absl::StrContains(info->Summary(), info->name)) << info->Summary();
}

TEST(CudaDeviceTest, OutOfRangeOrdinalIsAnError) {
  absl::StatusOr<DeviceInfo> info = ProbeCudaDevice(1 << 20);
  EXPECT_FALSE(info.ok());
}

TEST(CudaStatusTest, MapsErrorsWithCallAndLocation) {
  EXPECT_TRUE(CudaErrorToStatus(cudaSuccess, "x", "f.cc", 1).ok());
  const absl::Status oom =
      CudaErrorToStatus(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", "dev.cc", 42);
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(oom.message(), "cudaMalloc(&p, n) failed at dev.cc:42")) << oom;
  EXPECT_TRUE(absl::StrContains(oom.message(), "cudaErrorMemoryAllocation")) << oom;
  EXPECT_EQ(CudaErrorToStatus(cudaErrorNoDevice, "c", "f", 1).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaErrorToStatus(cudaErrorIllegalAddress, "c", "f", 1).code(),
            absl::StatusCode::kInternal);
  const absl::Status blas =
      CublasErrorToStatus(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmEx(...)", "gemm.cc", 7);
  EXPECT_EQ(blas.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(blas.message(), "cublasGemmEx(...) failed at gemm.cc:7")) << blas;
  EXPECT_TRUE(CublasErrorToStatus(CUBLAS_STATUS_SUCCESS, "c", "f", 1).ok());
}

absl::Status ReturnsThroughMacro() {
  VISMOE_CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}

TEST(CudaStatusTest, MacroReturnsTheError) {
  const absl::Status st = ReturnsThroughMacro();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "cudaErrorInvalidValue failed at")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "device_gpu_test.cc:")) << st;
}

// The arena's arithmetic never touches memory, so a made-up base is fine.
TEST(DeviceArenaTest, BumpAllocatesAlignedAndStopsAtCapacity) {
  void* base = reinterpret_cast<void*>(uintptr_t{0x10000});
  DeviceArena arena(base, 1024, 256);
  absl::StatusOr<void*> a = arena.Allocate(10);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, base);
  absl::StatusOr<void*> b = arena.Allocate(300);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b), 0x10000u + 256u);
  EXPECT_EQ(arena.used(), 256u + 300u);
  // Next would start at 768; 257 bytes do not fit in the remaining 256.
  absl::StatusOr<void*> c = arena.Allocate(257);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(c.status().message(), "257")) << c.status();
  EXPECT_EQ(arena.used(), 556u);  // a failed request changes nothing
  absl::StatusOr<void*> d = arena.Allocate(256);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*d), 0x10000u + 768u);
  EXPECT_EQ(arena.used(), 1024u);
  EXPECT_FALSE(arena.Allocate(1).ok());
  arena.Reset();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.high_water(), 1024u);
  absl::StatusOr<void*> e = arena.Allocate(1024);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, base);
}

TEST(DeviceArenaTest, UnalignedBaseIsAlignedUpAndHugeRequestsFail) {
  DeviceArena arena(reinterpret_cast<void*>(uintptr_t{0x1001}), 4096, 256);
  absl::StatusOr<void*> a = arena.Allocate(16);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a), 0x1100u);
  EXPECT_FALSE(arena.Allocate(SIZE_MAX).ok());  // no overflow wrap-around
  absl::StatusOr<float*> f = arena.AllocateArray<float>(4);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*f) % 256, 0u);
}

TEST(CudaDeviceGpuTest, BuffersStreamsEventsRoundTrip) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr size_t kN = 1 << 16;
  absl::StatusOr<PinnedHostBuffer> pinned = PinnedHostBuffer::Allocate(kN * sizeof(float));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  auto* h = static_cast<float*>(pinned->data());
  for (size_t i = 0; i < kN; ++i) h[i] = static_cast<float>(i) * 0.5f;
  absl::StatusOr<DeviceBuffer> dev = DeviceBuffer::Allocate(kN * sizeof(float));
  ASSERT_TRUE(dev.ok()) << dev.status();
  absl::StatusOr<Stream> stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<Event> done = Event::Create();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(CopyToDeviceAsync(dev->data(), h, kN * sizeof(float), stream->get()).ok());
  std::vector<float> back(kN, -1.0f);
  ASSERT_TRUE(CopyToHostAsync(back.data(), dev->data(), kN * sizeof(float), stream->get()).ok());
  ASSERT_TRUE(done->Record(stream->get()).ok());
  ASSERT_TRUE(done->Synchronize().ok());
  absl::StatusOr<bool> q = done->Query();
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(*q);
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(back[i], h[i]) << i;

  DeviceBuffer moved = *std::move(dev);
  EXPECT_NE(moved.data(), nullptr);
  EXPECT_EQ(moved.size(), kN * sizeof(float));
}

TEST(CudaDeviceGpuTest, OwningArenaAllocatesDeviceMemory) {
  VISMOE_SKIP_WITHOUT_GPU();
  absl::StatusOr<DeviceArena> arena = DeviceArena::Create(1 << 20);
  ASSERT_TRUE(arena.ok()) << arena.status();
  absl::StatusOr<int32_t*> p = arena->AllocateArray<int32_t>(1000);
  ASSERT_TRUE(p.ok());
  std::vector<int32_t> v(1000);
  for (int i = 0; i < 1000; ++i) v[i] = i * 3;
  ASSERT_TRUE(CopyToDevice(*p, v.data(), v.size() * sizeof(int32_t)).ok());
  std::vector<int32_t> back(1000);
  ASSERT_TRUE(CopyToHost(back.data(), *p, back.size() * sizeof(int32_t)).ok());
  EXPECT_EQ(back, v);
  EXPECT_EQ(arena->Allocate(2 << 20).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
