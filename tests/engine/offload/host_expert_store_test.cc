// ExpertFormat packing, HostExpertStore (both layouts, custom allocator) and
// DeviceArena carving.
#include "engine/offload/host_expert_store.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/offload/device_arena.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/offload/counting_host_allocator.h"
#include "tests/engine/offload/fake_expert_source.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

using testing::CountingHostAllocator;

TEST(HostExpertStoreTest, PacksEachExpertContiguouslyInBothLayouts) {
  for (auto layout : {ExpertWeights::Layout::kFusedTransposed, ExpertWeights::Layout::kSeparate}) {
    testing::FakeExpertSource src(3, 5, 8, 4, layout);
    CountingHostAllocator alloc;
    {
      const std::vector<int> layers = {2, 0};
      auto store = HostExpertStore::Create(src, layers, 5, &alloc);
      ASSERT_TRUE(store.ok()) << store.status();
      const ExpertFormat& f = (*store)->format();
      EXPECT_EQ(f.layout, layout);
      EXPECT_EQ(f.dtype, DType::kF32);
      EXPECT_EQ(f.bytes, 3u * 8 * 4 * sizeof(float));
      EXPECT_EQ((*store)->total_bytes(), 2 * 5 * f.bytes);
      EXPECT_EQ(alloc.allocations, 1);  // one block for everything
      for (int l : layers) {
        for (int e = 0; e < 5; ++e) {
          const void* b = (*store)->Block(l, e);
          ASSERT_NE(b, nullptr);
          EXPECT_TRUE(src.Holds(f.View(b), l, e)) << l << "/" << e;
        }
      }
      // Experts follow each other: one copy per expert.
      EXPECT_EQ(static_cast<const char*>((*store)->Block(2, 1)) -
                    static_cast<const char*>((*store)->Block(2, 0)),
                static_cast<std::ptrdiff_t>(f.bytes));
      EXPECT_EQ((*store)->Block(1, 0), nullptr);  // not stored
      EXPECT_EQ((*store)->Block(0, 5), nullptr);
    }
    EXPECT_EQ(alloc.frees, 1);
  }
}

// The CUDA backend asks for bf16 whatever the checkpoint holds: converted once
// at packing (round to nearest even), half the bytes of the F32 source.
TEST(HostExpertStoreTest, PacksAsTheRequestedDtype) {
  testing::FakeExpertSource src(2, 3, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  const std::vector<int> layers = {1};
  auto store = HostExpertStore::Create(src, layers, 3, nullptr, DType::kBF16);
  ASSERT_TRUE(store.ok()) << store.status();
  const ExpertFormat& f = (*store)->format();
  EXPECT_EQ(f.dtype, DType::kBF16);
  EXPECT_EQ(f.source_dtype, DType::kF32);
  EXPECT_EQ(f.bytes, 3u * 8 * 4 * 2);
  for (int e = 0; e < 3; ++e) {
    const ExpertWeights w = f.View((*store)->Block(1, e));
    EXPECT_EQ(w.gate_up.dtype, DType::kBF16);
    EXPECT_TRUE(src.Holds(w, 1, e)) << e;
  }
}

// --expert_dtype=fp8: experts of either layout become per-expert [out, in]
// e4m3 matrices with F32 scales per 128 x 128 block (two column blocks here,
// the second partial), each weight within half an e4m3 step of the source's.
TEST(HostExpertStoreTest, QuantisesToFp8BlocksInTheSeparateLayout) {
  constexpr int kH = 160, kI = 48;
  for (auto layout : {ExpertWeights::Layout::kFusedTransposed, ExpertWeights::Layout::kSeparate}) {
    SCOPED_TRACE(layout == ExpertWeights::Layout::kSeparate ? "separate" : "fused");
    testing::FakeExpertSource src(2, 3, kH, kI, layout);
    const std::vector<int> layers = {1};
    auto store = HostExpertStore::Create(src, layers, 3, nullptr, DType::kF8E4M3);
    ASSERT_TRUE(store.ok()) << store.status();
    const ExpertFormat& f = (*store)->format();
    EXPECT_EQ(f.layout, ExpertWeights::Layout::kSeparate);
    EXPECT_EQ(f.source_layout, layout);
    EXPECT_EQ(f.dtype, DType::kF8E4M3);
    ASSERT_TRUE(f.block.has_value());
    EXPECT_EQ(*f.block, (QuantBlock{128, 128}));
    // gate, up: [48, 160] -> 1 x 2 scales; down: [160, 48] -> 2 x 1; 64-byte aligned.
    EXPECT_EQ(f.bytes, 3u * (kI * kH + 64));
    ASSERT_TRUE(src.BeginLayer(Phase::kPrefill, 1, {2}).ok());
    auto source = src.Acquire(1, 2);
    ASSERT_TRUE(source.ok()) << source.status();
    const ExpertWeights q = f.View((*store)->Block(1, 2));
    for (int p = 0; p < 3; ++p) {
      const TensorView& t = p == 0 ? q.gate : p == 1 ? q.up : q.down;
      const int64_t out = t.dim(0), in = t.dim(1);
      EXPECT_EQ(t.shape, (p == 2 ? Shape{kH, kI} : Shape{kI, kH}));
      ASSERT_NE(t.scale.data, nullptr);
      const auto* codes = static_cast<const uint8_t*>(t.data);
      const auto* scales = static_cast<const float*>(t.scale.data);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          // The source weight (o, i) of the separate layout, from either layout.
          float want;
          if (layout == ExpertWeights::Layout::kSeparate) {
            const TensorView& s = p == 0 ? source->gate : p == 1 ? source->up : source->down;
            want = static_cast<const float*>(s.data)[o * in + i];
          } else if (p == 2) {  // down [I, H]
            want = static_cast<const float*>(source->down.data)[i * out + o];
          } else {  // gate_up [H, 2I]
            want = static_cast<const float*>(source->gate_up.data)[i * 2 * kI + p * kI + o];
          }
          const float scale = scales[(o / 128) * CeilDiv(in, 128) + i / 128];
          const float got = E4m3ToFloat(codes[o * in + i]) * scale;
          ASSERT_LE(std::fabs(got - want), std::fabs(want) / 16 + scale / 512)
              << "part " << p << " (" << o << ", " << i << ")";
        }
      }
    }
    src.Release(1, 2);
    src.EndLayer(1);
  }
}

// Places (layer, expert) into a block by its copy segments, as the transfer
// engine does.
std::vector<char> Gather(const HostExpertStore& store, int layer, int expert) {
  std::vector<char> block(store.format().bytes, 0);
  for (const CopySegment& s : store.CopySegments(layer, expert)) {
    EXPECT_LE(s.dst_offset + s.bytes, block.size());
    std::memcpy(block.data() + s.dst_offset, s.src, s.bytes);
  }
  return block;
}

// Mapped mode: no second host copy; an expert's tensors are copied straight
// from the source's memory into the block, where the format puts them.
TEST(HostExpertStoreTest, MapsTheSourceWhenItsViewsOutliveRelease) {
  for (auto layout : {ExpertWeights::Layout::kFusedTransposed, ExpertWeights::Layout::kSeparate}) {
    testing::FakeExpertSource src(3, 5, 8, 4, layout);
    src.stable_views = true;
    const std::vector<int> layers = {2, 0};
    auto store = HostExpertStore::Create(src, layers, 5, nullptr, std::nullopt,
                                         /*map_if_possible=*/true);
    ASSERT_TRUE(store.ok()) << store.status();
    const HostExpertStore& s = **store;
    EXPECT_TRUE(s.mapped());
    EXPECT_EQ(s.total_bytes(), 0u);
    EXPECT_EQ(s.Block(2, 0), nullptr);
    const size_t tensors = layout == ExpertWeights::Layout::kFusedTransposed ? 2 : 3;
    for (int l : layers) {
      for (int e = 0; e < 5; ++e) {
        const HostExpertStore::Segments segments = s.CopySegments(l, e);
        ASSERT_EQ(segments.size(), tensors);
        auto w = src.Acquire(l, e);
        ASSERT_TRUE(w.ok());
        EXPECT_EQ(segments.back().src, w->down.data) << "points into the source";
        const std::vector<char> block = Gather(s, l, e);
        EXPECT_TRUE(src.Holds(s.format().View(block.data()), l, e)) << l << "/" << e;
      }
    }
    EXPECT_TRUE(s.CopySegments(1, 0).empty());  // not stored
    EXPECT_TRUE(s.CopySegments(0, 5).empty());
  }
}

// Packed whenever mapping is not allowed: not asked, a dtype conversion, or
// views that die at Release.
TEST(HostExpertStoreTest, PacksWhenMappingIsNotAllowed) {
  testing::FakeExpertSource stable(2, 3, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  stable.stable_views = true;
  testing::FakeExpertSource transient(2, 3, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  const std::vector<int> layers = {1};
  struct Case {
    const char* why;
    testing::FakeExpertSource* src;
    HostAllocator* allocator;
    std::optional<DType> dtype;
    bool map;
  };
  for (const Case& c : {Case{"not asked", &stable, nullptr, std::nullopt, false},
                        Case{"conversion", &stable, nullptr, DType::kBF16, true},
                        Case{"transient views", &transient, nullptr, std::nullopt, true}}) {
    auto store = HostExpertStore::Create(*c.src, layers, 3, c.allocator, c.dtype, c.map);
    ASSERT_TRUE(store.ok()) << c.why << ": " << store.status();
    EXPECT_FALSE((*store)->mapped()) << c.why;
    EXPECT_GT((*store)->total_bytes(), 0u) << c.why;
    const HostExpertStore::Segments segments = (*store)->CopySegments(1, 2);
    ASSERT_EQ(segments.size(), 1u) << c.why;
    EXPECT_EQ(segments[0].src, (*store)->Block(1, 2)) << c.why;
    EXPECT_EQ(segments[0].bytes, (*store)->format().bytes) << c.why;
    const std::vector<char> block = Gather(**store, 1, 2);
    EXPECT_TRUE(c.src->Holds((*store)->format().View(block.data()), 1, 2)) << c.why;
  }
}

// A page-locking allocator does not stop mapping (the CUDA backend copies from
// the checkpoint's pageable memory then): it allocates nothing.
TEST(HostExpertStoreTest, MapsWithAPageLockingAllocatorWithoutAllocating) {
  testing::FakeExpertSource src(2, 3, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  src.stable_views = true;
  CountingHostAllocator alloc;
  auto store = HostExpertStore::Create(src, std::vector<int>{1}, 3, &alloc, std::nullopt, true);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->mapped());
  EXPECT_EQ((*store)->total_bytes(), 0u);
  EXPECT_EQ(alloc.allocations, 0);
  const std::vector<char> block = Gather(**store, 1, 2);
  EXPECT_TRUE(src.Holds((*store)->format().View(block.data()), 1, 2));
  // Asked to pack, the same allocator holds the copy.
  store = HostExpertStore::Create(src, std::vector<int>{1}, 3, &alloc, std::nullopt, false);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE((*store)->mapped());
  EXPECT_EQ(alloc.allocations, 1);
  EXPECT_EQ(alloc.bytes_total, (*store)->total_bytes());
  // Mapping wanted but a conversion needed (--expert_dtype=fp8): packed, in
  // pageable memory rather than the page-locked block mapping avoided.
  store = HostExpertStore::Create(src, std::vector<int>{1}, 3, &alloc, DType::kF8E4M3, true);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE((*store)->mapped());
  EXPECT_GT((*store)->total_bytes(), 0u);
  EXPECT_EQ(alloc.allocations, 1);  // still only the packed bf16 copy above
}

TEST(HostExpertStoreTest, FormatRejectsMixedDtypes) {
  std::vector<float> f(32);
  std::vector<uint16_t> h(16);
  ExpertWeights w;
  w.gate_up = TensorView{f.data(), DType::kF32, {4, 8}};
  w.down = TensorView{h.data(), DType::kBF16, {4, 4}};
  EXPECT_FALSE(ExpertFormat::FromWeights(w).ok());
  w.down = TensorView{f.data(), DType::kF32, {4, 4}};
  auto fmt = ExpertFormat::FromWeights(w);
  ASSERT_TRUE(fmt.ok());
  EXPECT_TRUE(fmt->Matches(w));
  w.down.shape = {2, 8};
  EXPECT_FALSE(fmt->Matches(w));
}

// GPT-OSS's MXFP4 experts (kFused, [out, in]) are packed as published:
// blocks at half a byte per weight, then their e8m0 scales, each part
// 64-byte aligned; never converted to another dtype.
TEST(HostExpertStoreTest, PacksMxfp4ExpertsAsPublished) {
  constexpr int64_t kH = 64, kI = 32;
  std::vector<uint8_t> gu(2 * kI * kH / 2), gu_s(2 * kI * kH / 32), d(kH * kI / 2),
      d_s(kH * kI / 32);
  for (size_t k = 0; k < gu.size(); ++k) gu[k] = static_cast<uint8_t>(k * 7);
  for (size_t k = 0; k < d.size(); ++k) d[k] = static_cast<uint8_t>(k * 3);
  for (size_t k = 0; k < gu_s.size(); ++k) gu_s[k] = static_cast<uint8_t>(120 + k % 9);
  for (size_t k = 0; k < d_s.size(); ++k) d_s[k] = static_cast<uint8_t>(125 + k % 5);
  ExpertWeights w;
  w.layout = ExpertWeights::Layout::kFused;
  w.gate_up = {gu.data(), DType::kMxFp4, {2 * kI, kH}, {gu_s.data(), DType::kE8M0, 1, 32}};
  w.down = {d.data(), DType::kMxFp4, {kH, kI}, {d_s.data(), DType::kE8M0, 1, 32}};
  auto f = ExpertFormat::FromWeights(w);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->layout, ExpertWeights::Layout::kFused);
  EXPECT_EQ(f->dtype, DType::kMxFp4);
  EXPECT_EQ(f->scale_dtype, DType::kE8M0);
  EXPECT_EQ(f->block, (QuantBlock{1, 32}));
  EXPECT_EQ(f->bytes, 2048u + 128 + 1024 + 64);  // 4.25 bits per weight
  EXPECT_TRUE(f->Matches(w));
  std::vector<char> block(f->bytes);
  f->Pack(w, block.data());
  const ExpertWeights v = f->View(block.data());
  EXPECT_EQ(v.layout, ExpertWeights::Layout::kFused);
  for (auto [got, want, scales] : {std::tuple{&v.gate_up, &gu, &gu_s}, {&v.down, &d, &d_s}}) {
    EXPECT_EQ(got->dtype, DType::kMxFp4);
    EXPECT_EQ(got->scale, (BlockScale{got->scale.data, DType::kE8M0, 1, 32}));
    EXPECT_EQ(std::memcmp(got->data, want->data(), want->size()), 0);
    EXPECT_EQ(std::memcmp(got->scale.data, scales->data(), scales->size()), 0);
  }
  // A decoder asking for bf16 (CUDA) widens block-scaled experts itself.
  auto bf16 = ExpertFormat::FromWeights(w, DType::kBF16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->dtype, DType::kMxFp4);
  EXPECT_EQ(bf16->bytes, f->bytes);
  EXPECT_THAT(std::string(ExpertFormat::FromWeights(w, DType::kF8E4M3).status().message()),
              HasSubstr("MXFP4 experts cannot be converted to F8_E4M3"));
  ExpertWeights plain;
  std::vector<float> f32(2 * kI * kH);
  plain.gate_up = {f32.data(), DType::kF32, {kH, 2 * kI}};
  plain.down = {f32.data(), DType::kF32, {kI, kH}};
  EXPECT_THAT(std::string(ExpertFormat::FromWeights(plain, DType::kMxFp4).status().message()),
              HasSubstr("not quantised to MXFP4"));
}

TEST(DeviceArenaTest, CarvesAlignedRegionsWithinCapacity) {
  const int64_t cap = DeviceArena::CapacityFor({1000, 300});
  EXPECT_EQ(cap, 1024 + 512);
  auto arena = DeviceArena::Create(cap, nullptr);
  ASSERT_TRUE(arena.ok()) << arena.status();
  auto a = (*arena)->Carve("pinned_prefix", 1000);
  ASSERT_TRUE(a.ok());
  auto b = (*arena)->Carve("slab_cache", 300);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % DeviceArena::kAlignment, 0u);
  EXPECT_GE(*b, *a + 1000);
  EXPECT_TRUE((*arena)->Contains(*b, 300));
  auto c = (*arena)->Carve("extra", 1);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("'extra'"));
  EXPECT_EQ((*arena)->regions().size(), 2u);
  EXPECT_EQ((*arena)->used(), cap);
}

}  // namespace
}  // namespace vismoe
