// Checkpoint: the weights of one Hugging Face model directory.
//
// The directory holds either a single "model.safetensors" (preferred when both
// exist, as transformers does) or "model.safetensors.index.json" =
// {"metadata": {...}, "weight_map": {tensor: shard file}} whose shards sit in the
// same directory. Each shard is mapped once. Open() validates the index: it must
// be a JSON object with a "weight_map" of string -> string; shard names must be
// plain file names (no "/", "\", or ".."), every shard must exist and hold every
// tensor the map assigns to it, and no tensor may appear in two shards. Tensors
// a shard holds but the map does not list are ignored (with a warning): the index
// is authoritative, as in transformers.
//
// FromMemory() builds the other storage mode: tensors in memory the Checkpoint
// owns (synthetic weights, engine/model/synthetic_weights.h); no files at all.
//
// Thread safety: immutable after Open()/FromMemory(); const methods may be
// called concurrently. Ownership: owns the mappings (or the memory); returned
// views stay valid until the Checkpoint is destroyed. Not copyable or movable.
#ifndef VISMOE_ENGINE_MODEL_CHECKPOINT_H_
#define VISMOE_ENGINE_MODEL_CHECKPOINT_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/tensor.h"
#include "engine/model/safetensors_file.h"

namespace vismoe {

class Checkpoint {
 public:
  static constexpr const char* kSingleFile = "model.safetensors";
  static constexpr const char* kIndexFile = "model.safetensors.index.json";

  // NotFound if `dir` has neither file (or a shard is missing); InvalidArgument
  // for a malformed index or shard. Messages name the file at fault.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  // A checkpoint over `tensors`, whose views point into `storage` (kept alive
  // as long as the Checkpoint). `label` stands in for the directory in dir()
  // and in error messages. REQUIRES: unique names; supported dtypes.
  static std::unique_ptr<Checkpoint> FromMemory(
      std::string label, std::shared_ptr<void> storage,
      std::vector<std::pair<std::string, TensorView>> tensors);

  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  bool Has(absl::string_view name) const {
    return shard_of_.contains(name) || in_memory_.contains(name);
  }
  // NotFound: "tensor 'X' not found in <dir>"; InvalidArgument if the tensor's
  // dtype is not F32/F16/BF16 (F8_E4M3 only through GetLinear, U8 only
  // through GetMxfp4: their values mean nothing without their scales).
  absl::StatusOr<TensorView> Get(absl::string_view name) const;
  // As Get(name), and InvalidArgument
  // "tensor 'X' has shape [a, b], expected [c, d]" if the shape differs.
  absl::StatusOr<TensorView> Get(absl::string_view name, const Shape& expected) const;
  // A linear weight [..., out, in]: as Get(name, expected), and where `block`
  // is set (an FP8 checkpoint's weight_block_size) an F8_E4M3 tensor with its
  // scales `<name>_scale_inv` [..., ceil(out / rows), ceil(in / cols)] (F32 or
  // BF16, finite) attached as the view's `scale`. Errors name the tensor.
  absl::StatusOr<TensorView> GetLinear(absl::string_view name, const Shape& expected,
                                       const std::optional<QuantBlock>& block) const;
  // An MXFP4 linear weight as GPT-OSS publishes its experts: `<name>_blocks`
  // U8 [..., out, in / 32, 16] and `<name>_scales` U8 (or F8_E8M0)
  // [..., out, in / 32], as one MXFP4 view [..., out, in] = `expected` whose
  // scale is the e8m0 bytes (rows 1, cols 32). InvalidArgument naming the
  // tensor for another dtype or shape, `in` not a multiple of 32, or a NaN
  // scale (0xff); NotFound when either tensor is absent.
  absl::StatusOr<TensorView> GetMxfp4(absl::string_view name, const Shape& expected) const;
  // Bytes of the stored tensor whatever its dtype; NotFound if absent.
  absl::StatusOr<size_t> StoredBytes(absl::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  const std::string& dir() const { return dir_; }
  // Number of safetensors files mapped (1 for an unsharded checkpoint, 0 for FromMemory).
  size_t num_shards() const { return shards_.size(); }

 private:
  explicit Checkpoint(std::string dir) : dir_(std::move(dir)) {}

  absl::Status OpenIndex(const std::string& index_path);
  // The view whatever its (supported) dtype, F8_E4M3 included.
  absl::StatusOr<TensorView> GetAnyDType(absl::string_view name) const;
  absl::Status CheckShape(absl::string_view name, const TensorView& view,
                          const Shape& expected) const;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  absl::flat_hash_map<std::string, const SafetensorsFile*> shard_of_;  // tensor -> its shard
  std::shared_ptr<void> storage_;                                      // FromMemory only
  absl::flat_hash_map<std::string, TensorView> in_memory_;             // views into storage_
};

// InvalidArgument naming the checkpoint and tensor `name` when `view` holds a
// NaN or an infinity (FirstNonFinite): broken weights are refused at load,
// where every answer would otherwise come out garbled. One pass over the
// bytes; the loaders check every non-expert tensor (about 2.4 GB for the
// 30B-A3B shape), the experts are not scanned.
absl::Status CheckFinite(const Checkpoint& checkpoint, const std::string& name,
                         const TensorView& view);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_CHECKPOINT_H_
