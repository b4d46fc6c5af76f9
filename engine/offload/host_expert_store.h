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
// Thread safety: immutable after Create(); reads from any thread.
// Ownership: owns its block; the allocator must outlive the store.
#ifndef VISMOE_ENGINE_OFFLOAD_HOST_EXPERT_STORE_H_
#define VISMOE_ENGINE_OFFLOAD_HOST_EXPERT_STORE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/offload/expert_provider.h"

namespace vismoe {

// Where one expert's tensors sit in a contiguous block.
struct ExpertFormat {
  struct Part {
    size_t offset = 0;
    Shape shape;
    bool operator==(const Part&) const = default;
  };
  ExpertWeights::Layout layout = ExpertWeights::Layout::kFusedTransposed;
  DType dtype = DType::kBF16;         // of the packed block
  DType source_dtype = DType::kBF16;  // of the ExpertWeights packed from
  std::vector<Part> parts;  // fused: gate_up, down; separate: gate, up, down
  size_t bytes = 0;         // sum of the parts (each part 64-byte aligned)

  // The format of `w` packed as `dtype` (unset = w's own). InvalidArgument if
  // the tensors of `w` disagree in dtype or are missing.
  static absl::StatusOr<ExpertFormat> FromWeights(const ExpertWeights& w,
                                                  std::optional<DType> dtype = std::nullopt);
  // True when `w` has this format's layout, source dtype and shapes.
  bool Matches(const ExpertWeights& w) const;
  // Copies the tensors of `w` into `dst` (bytes() long), converting from
  // source_dtype to dtype (round to nearest even). REQUIRES: Matches(w).
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
  static absl::StatusOr<std::unique_ptr<HostExpertStore>> Create(
      ExpertProvider& source, absl::Span<const int> layers, int num_experts,
      HostAllocator* allocator, std::optional<DType> dtype = std::nullopt);
  ~HostExpertStore();
  HostExpertStore(const HostExpertStore&) = delete;
  HostExpertStore& operator=(const HostExpertStore&) = delete;

  const ExpertFormat& format() const { return format_; }
  // Block of (layer, expert); null if the layer is not in the store.
  const void* Block(int layer, int expert) const;
  size_t total_bytes() const { return total_bytes_; }

 private:
  HostExpertStore() = default;

  ExpertFormat format_;
  int num_experts_ = 0;
  std::vector<int> slot_of_layer_;  // decoder layer -> index in the store, -1 if absent
  HostAllocator* allocator_ = nullptr;
  char* data_ = nullptr;
  size_t total_bytes_ = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_HOST_EXPERT_STORE_H_
