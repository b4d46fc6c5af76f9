// The CUDA half of the offload copy path: page-locked host expert store
// (PinnedHostAllocator), cudaMalloc'd device arena (CudaDeviceAllocator) and
// the copy stream (CudaCopyBackend) driven by the TransferEngine. Expert
// blocks go host -> device through the engine and are read back with a plain
// cudaMemcpy and compared byte for byte. Everything that needs a device skips
// without one; only the no-device error path runs everywhere.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(OffloadCopyGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "engine/offload/device_arena.h"
#include "engine/offload/host_expert_store.h"
#include "engine/offload/transfer_engine.h"
#include "engine/device/cuda/cuda_copy_backend.h"
#include "engine/device/cuda/cuda_device_allocator.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/pinned_host_allocator.h"
#include "tests/engine/offload/fake_expert_source.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

// The offload runtime's arena, not cuda::DeviceArena (the kernels' scratch).
using OffloadArena = ::vismoe::DeviceArena;

cudaMemoryType MemoryTypeOf(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  return attr.type;
}

TEST(PinnedHostAllocatorGpuTest, AllocatesPageLockedMemoryAndFreesIt) {
  VISMOE_SKIP_WITHOUT_GPU();
  PinnedHostAllocator alloc;
  const size_t bytes = (1 << 20) + 123;
  void* p = alloc.Allocate(bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(MemoryTypeOf(p), cudaMemoryTypeHost);
  // ExpertFormat aligns every part to 64 bytes inside a block.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(p, 0x3c, bytes);  // plain cached host memory: the CPU packs into it
  EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0x3c);
  alloc.Free(p, bytes);
  void* empty = alloc.Allocate(0);
  EXPECT_NE(empty, nullptr);  // null means failure only
  alloc.Free(empty, 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(PinnedHostAllocatorGpuTest, ImpossibleSizeGivesNullAndNoStickyError) {
  VISMOE_SKIP_WITHOUT_GPU();
  PinnedHostAllocator pinned;
  EXPECT_EQ(pinned.Allocate(size_t{1} << 60), nullptr);
  CudaDeviceAllocator device_alloc(0);
  EXPECT_EQ(device_alloc.Allocate(size_t{1} << 60), nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The arena turns the null into a status naming the allocator.
  auto arena = OffloadArena::Create(int64_t{1} << 60, &device_alloc);
  ASSERT_FALSE(arena.ok());
  EXPECT_TRUE(absl::StrContains(arena.status().message(), "cuda:0")) << arena.status();
}

TEST(CudaCopyBackendTest, CreateFailsNamingTheCallOrGivesAStream) {
  // Runs with or without a device.
  const absl::StatusOr<DeviceInfo> device = ProbeCudaDevice();
  auto backend = CudaCopyBackend::Create(0);
  if (!device.ok()) {
    ASSERT_FALSE(backend.ok());
    EXPECT_TRUE(absl::StrContains(backend.status().message(), "cudaSetDevice(device) failed at"))
        << backend.status();
    return;
  }
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_NE((*backend)->stream(), nullptr);
  EXPECT_STREQ((*backend)->name(), "cuda-h2d");
  EXPECT_EQ((*backend)->device(), 0);
}

// Experts of a fake checkpoint in a pinned store; slabs in a cudaMalloc'd arena.
struct Rig {
  static constexpr int kLayers = 2, kExperts = 4;
  ::vismoe::testing::FakeExpertSource source{kLayers, kExperts, /*h=*/64, /*i=*/48,
                                             ExpertWeights::Layout::kFusedTransposed};
  PinnedHostAllocator pinned;
  CudaDeviceAllocator device_alloc{0};
  std::unique_ptr<HostExpertStore> store;
  std::unique_ptr<OffloadArena> arena;
  char* slabs = nullptr;
  size_t stride = 0;

  void Build(int num_slabs) {
    const std::vector<int> layers = {0, 1};
    auto s = HostExpertStore::Create(source, layers, kExperts, &pinned);
    ASSERT_TRUE(s.ok()) << s.status();
    store = *std::move(s);
    stride = store->format().bytes;
    const int64_t slab_bytes = static_cast<int64_t>(stride) * num_slabs;
    auto a = OffloadArena::Create(OffloadArena::CapacityFor({slab_bytes}), &device_alloc);
    ASSERT_TRUE(a.ok()) << a.status();
    arena = *std::move(a);
    auto region = arena->Carve("slab_cache", slab_bytes);
    ASSERT_TRUE(region.ok()) << region.status();
    slabs = *region;
    // Zeroed and finished before any copy: the copy stream does not wait for
    // the legacy stream the memset runs on.
    ASSERT_EQ(cudaMemset(slabs, 0, stride * num_slabs), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<char> Download(int slot) const {
    std::vector<char> out(stride);
    const absl::Status st = CopyToHost(out.data(), slabs + slot * stride, stride);
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }
  bool SlotHolds(int slot, int layer, int expert) const {
    const std::vector<char> bytes = Download(slot);
    return std::memcmp(bytes.data(), store->Block(layer, expert), stride) == 0 &&
           source.Holds(store->format().View(bytes.data()), layer, expert);
  }
};

TEST(CudaCopyBackendGpuTest, RoundTripsExpertBlocksThroughTheTransferEngine) {
  VISMOE_SKIP_WITHOUT_GPU();
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Build(/*num_slabs=*/8));
  EXPECT_EQ(MemoryTypeOf(rig.store->Block(1, 3)), cudaMemoryTypeHost);
  EXPECT_EQ(MemoryTypeOf(rig.slabs), cudaMemoryTypeDevice);
  EXPECT_FALSE(rig.arena->host_accessible());
  auto backend = CudaCopyBackend::Create(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  TransferEngine::Options options;
  options.backend = backend->get();
  TransferEngine te(options);
  // Slot k gets expert (k / 4, 3 - k % 4): every block of the store, shuffled.
  std::mutex mu;
  int completed = 0;
  for (int k = 0; k < 8; ++k) {
    TransferEngine::Request r;
    r.src = rig.store->Block(k / 4, 3 - k % 4);
    r.dst = rig.slabs + k * rig.stride;
    r.bytes = rig.stride;
    r.priority = k % 3;
    r.on_done = [&](const absl::Status& copied) {
      EXPECT_TRUE(copied.ok()) << copied;
      std::lock_guard<std::mutex> lock(mu);
      ++completed;
    };
    te.Submit(std::move(r));
  }
  te.WaitIdle();
  EXPECT_EQ(completed, 8);
  for (int k = 0; k < 8; ++k) {
    EXPECT_TRUE(rig.SlotHolds(k, k / 4, 3 - k % 4)) << "slot " << k;
  }
  const TransferEngine::Stats s = te.stats();
  EXPECT_EQ(s.copies, 8u);
  EXPECT_EQ(s.bytes, 8u * rig.stride);
  EXPECT_EQ(s.failed, 0u);
  te.Shutdown();  // before the backend it borrows goes away
}

TEST(CudaCopyBackendGpuTest, CompletesByPriorityWithTheBytesAlreadyOnTheDevice) {
  VISMOE_SKIP_WITHOUT_GPU();
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Build(/*num_slabs=*/6));
  auto backend = CudaCopyBackend::Create(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  TransferEngine::Options options;
  options.start_paused = true;
  options.backend = backend->get();
  TransferEngine te(options);
  const double prio[] = {1, 5, 3, 5, 0, 3};
  std::mutex mu;
  std::vector<int> done;
  for (int k = 0; k < 6; ++k) {
    TransferEngine::Request r;
    r.src = rig.store->Block(k % 2, k % 4);
    r.dst = rig.slabs + k * rig.stride;
    r.bytes = rig.stride;
    r.priority = prio[k];
    r.on_done = [&, k](const absl::Status& copied) {
      EXPECT_TRUE(copied.ok()) << copied;
      // On the copy thread, through the legacy stream, which does not wait for
      // the non-blocking copy stream: the bytes must already be there.
      EXPECT_TRUE(rig.SlotHolds(k, k % 2, k % 4)) << "slot " << k << " completed early";
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(k);
    };
    te.Submit(std::move(r));
  }
  EXPECT_EQ(te.queued(), 6u);
  te.Resume();
  te.WaitIdle();
  EXPECT_EQ(done, (std::vector<int>{1, 3, 2, 5, 0, 4}));
  EXPECT_EQ(te.stats().bytes, 6u * rig.stride);
  te.Shutdown();
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
