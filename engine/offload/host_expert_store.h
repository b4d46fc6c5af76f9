// HostExpertStore: every expert of the offloaded MoE layers packed into host
// memory, each expert one contiguous block, so moving an expert to the device
// is exactly one copy (performance-limits.md: ~5-7 us per cudaMemcpyAsync).
// ExpertFormat says where gate/up/down sit inside a block and rebuilds an
// ExpertWeights view over a block wherever it lives (host store, slab, pinned
// prefix). The dtype of the checkpoint is kept unless the owner asks for
// another one (the CUDA backend computes in bf16 and packs F16/F32
// checkpoints' experts as bf16, converted once at start-up).
// Memory comes from a HostAllocator so the CUDA backend can page-lock it
// (cudaHostAlloc) while the CPU backend uses aligned heap memory.
// Mapped mode (no second host copy): where the owner asks for it
// (engine/offload/host_store_mode.h), the source's views outlive Release()
// (the mmapped checkpoint) and no conversion is needed, the store keeps the
// source's views instead of packing them, and a copy gathers an expert's two
// or three tensors straight from the checkpoint into the destination block
// (Segments()). A 30B checkpoint's experts would otherwise be held twice in
// host memory.
// Thread safety: immutable after Create(); reads from any thread.
// Ownership: owns its block (packed mode); the allocator must outlive the
// store; in mapped mode the source must outlive it.
#ifndef VISMOE_ENGINE_OFFLOAD_HOST_EXPERT_STORE_H_
#define VISMOE_ENGINE_OFFLOAD_HOST_EXPERT_STORE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/offload/copy_backend.h"
#include "engine/offload/expert_provider.h"

namespace vismoe {

// Each part and each part's scales start on this boundary of a packed block.
inline constexpr size_t kExpertPartAlign = 64;

// Where one expert's tensors sit in a contiguous block.
// Block-quantised formats (dtype F8_E4M3 or MXFP4) also hold each part's
// scales in the block, after the part: an FP8 or MXFP4 checkpoint's experts
// as published (kept in their layout, never converted), or
// experts quantised at load (--expert_dtype=fp8: every layout becomes
// kSeparate [out, in] matrices, 128 x 128 blocks, F32 scales, the recipe of
// engine/core/fp8_block.h), so one copy moves weights and scales together.
struct ExpertFormat {
  struct Part {
    size_t offset = 0;
    Shape shape;
    size_t scale_offset = 0;  // block-quantised formats only
    bool operator==(const Part&) const = default;
  };
  ExpertWeights::Layout layout = ExpertWeights::Layout::kFusedTransposed;
  ExpertWeights::Layout source_layout = ExpertWeights::Layout::kFusedTransposed;
  DType dtype = DType::kBF16;         // of the packed block
  DType source_dtype = DType::kBF16;  // of the ExpertWeights packed from
  // Set for block-quantised formats: the scales' block and dtype.
  std::optional<QuantBlock> block;
  DType scale_dtype = DType::kF32;
  std::vector<Part> parts;  // fused: gate_up, down; separate: gate, up, down
  std::vector<Shape> source_shapes;  // of the ExpertWeights packed from
  size_t bytes = 0;                  // sum of the parts and scales (each 64-byte aligned)

  // The format of `w` packed as `dtype` (unset = w's own). BF16 asks for
  // float experts widened to bf16: block-scaled (F8_E4M3, MXFP4) ones stay as
  // stored, and a decoder asking for bf16 widens those itself (the CUDA
  // backend). InvalidArgument if the tensors of `w` disagree in dtype or are
  // missing, or for a conversion out of F8_E4M3 or MXFP4 to another format,
  // or into MXFP4.
  static absl::StatusOr<ExpertFormat> FromWeights(const ExpertWeights& w,
                                                  std::optional<DType> dtype = std::nullopt);
  // True when `w` has this format's source layout, dtype, scales and shapes.
  bool Matches(const ExpertWeights& w) const;
  // Copies the tensors of `w` into `dst` (bytes() long), converting from
  // source_dtype to dtype (round to nearest even; to F8_E4M3 by block
  // quantisation). REQUIRES: Matches(w).
  void Pack(const ExpertWeights& w, void* dst) const;
  // Views over a packed block.
  ExpertWeights View(const void* block) const;

  bool operator==(const ExpertFormat&) const = default;
};

// Host memory source; the CUDA backend supplies a page-locking one.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual void* Allocate(size_t bytes) = 0;  // null on failure
  virtual void Free(void* p, size_t bytes) = 0;
};

// 4 KiB-aligned heap memory.
class AlignedHostAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes) override;
  void Free(void* p, size_t bytes) override;
  static AlignedHostAllocator* Default();
};

class HostExpertStore {
 public:
  // Packs every expert of `layers` (decoder layer ids) read through `source`
  // (usually the ResidentExpertProvider over the mmapped checkpoint).
  // `allocator` null = AlignedHostAllocator::Default().
  // `dtype`: the dtype experts are packed in (unset = the checkpoint's).
  // `map_if_possible`: keep the source's views instead (mapped mode) when
  // `dtype` is unset or the source's and source.views_outlive_release();
  // `allocator` then allocates nothing. Where a conversion stops mapping,
  // the packed copy is pageable (AlignedHostAllocator) all the same: a
  // page-locked one was not wanted or would not fit.
  static absl::StatusOr<std::unique_ptr<HostExpertStore>> Create(
      ExpertProvider& source, absl::Span<const int> layers, int num_experts,
      HostAllocator* allocator, std::optional<DType> dtype = std::nullopt,
      bool map_if_possible = false);
  ~HostExpertStore();
  HostExpertStore(const HostExpertStore&) = delete;
  HostExpertStore& operator=(const HostExpertStore&) = delete;

  using Segments = std::vector<CopySegment>;

  const ExpertFormat& format() const { return format_; }
  bool mapped() const { return !views_.empty(); }
  // Block of (layer, expert) in packed mode; null in mapped mode or if the
  // layer is not in the store.
  const void* Block(int layer, int expert) const;
  // What to copy into a format().bytes block to place (layer, expert) there:
  // one segment in packed mode, one per tensor in mapped mode (the block's
  // alignment padding is not written). Empty if the layer is not in the store.
  Segments CopySegments(int layer, int expert) const;
  // The weights of (layer, expert) where the store keeps them (the source's
  // views in mapped mode, views over its packed block otherwise), to compute
  // with on the host; valid for the store's life. NotFound if the layer is
  // not in the store.
  absl::StatusOr<ExpertWeights> Weights(int layer, int expert) const;
  // Host bytes the store allocated (0 in mapped mode).
  size_t total_bytes() const { return total_bytes_; }

 private:
  HostExpertStore() = default;
  // Index of (layer, expert) in the store; -1 if absent.
  int64_t IndexOf(int layer, int expert) const;
  // Takes the format from the first expert and allocates the packed block,
  // or sizes views_ when the store may map and no conversion is asked for.
  absl::Status SetFormat(const ExpertWeights& w, std::optional<DType> dtype, bool may_map,
                         size_t num_layers);
  // Packs or keeps (mapped) expert `e` of the layer at store index `li`.
  absl::Status Add(size_t li, int layer, int e, const ExpertWeights& w);

  ExpertFormat format_;
  int num_experts_ = 0;
  std::vector<int> slot_of_layer_;  // decoder layer -> index in the store, -1 if absent
  HostAllocator* allocator_ = nullptr;
  char* data_ = nullptr;
  size_t total_bytes_ = 0;
  std::vector<ExpertWeights> views_;  // mapped mode: the source's, by IndexOf
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_HOST_EXPERT_STORE_H_
