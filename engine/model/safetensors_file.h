// SafetensorsFile: one memory-mapped, validated .safetensors file.
//
// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON header, then the data section. The header maps
// tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets are
// relative to the data section) plus an optional "__metadata__" string->string map.
//
// Open() validates everything before any view is handed out, so every view is
// in bounds and sized consistently with its shape:
//   - header length within the file and at most kMaxHeaderBytes;
//   - the header is a JSON object; "__metadata__" (if present) maps strings to strings;
//   - each dtype is a known safetensors dtype, each shape a list of non-negative
//     integers whose element count and byte size do not overflow;
//   - 0 <= begin <= end <= data size and end - begin == numel * dtype size;
//   - tensors tile the data section exactly, as the reference implementation
//     requires: no overlap, no hole, no trailing bytes (a truncated file fails here);
//   - each supported tensor starts at a file offset that is a multiple of its
//     dtype size. The mapping is page aligned, so the view's pointer is then
//     naturally aligned and readers may load uint16_t / float directly. Writers
//     that follow the reference implementation (header padded to 8 bytes, tensors
//     ordered by decreasing alignment) always satisfy this; a misaligned tensor is
//     rejected rather than silently read through a misaligned pointer.
//
// Dtypes: F32, F16 and BF16 are supported and get zero-copy views. Other valid
// safetensors dtypes (BOOL, U8, I8, ..., I64, F64, F8_E4M3, F8_E5M2, ...) are
// validated for bounds and then recorded as unsupported: the file still opens (a
// checkpoint may carry an integer buffer nobody reads), but Get() on such a
// tensor is InvalidArgument naming the tensor and its dtype, and Find() returns
// nullptr. A dtype string that is not a safetensors dtype at all fails Open().
//
// Thread safety: immutable after Open(); all const methods may be called
// concurrently. Ownership: owns the mapping; views stay valid until the object
// is destroyed. Not copyable or movable (views point into the mapping).
#ifndef VISMOE_ENGINE_MODEL_SAFETENSORS_FILE_H_
#define VISMOE_ENGINE_MODEL_SAFETENSORS_FILE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/tensor.h"

namespace vismoe {

class SafetensorsFile {
 public:
  // The reference implementation's cap; a larger header means a corrupt file.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and validates `path`. NotFound if the file does not exist,
  // InvalidArgument (message names the file and the offending tensor/field) if
  // it is not a well-formed safetensors file.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Validates a copy of a whole file's `bytes` held in memory instead of a
  // mapping (the fuzzer's entry point: ASan then sees every read past the
  // end). `label` stands in for the path in path() and in errors. Same checks
  // and errors as Open(). The copy is allocated with operator new[], so its
  // alignment is at least that of the page-aligned mapping for F32/F16/BF16.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string label,
                                                                    absl::string_view bytes);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // The view of `name`, or nullptr if absent or of an unsupported dtype.
  const TensorView* Find(absl::string_view name) const;
  // The view of `name`. NotFound if absent, InvalidArgument if its dtype is
  // not F32/F16/BF16.
  absl::StatusOr<TensorView> Get(absl::string_view name) const;
  // True for every tensor in the header, supported dtype or not.
  bool Contains(absl::string_view name) const { return entries_.contains(name); }

  // All tensor names in the header (supported or not), sorted.
  const std::vector<std::string>& names() const { return names_; }
  // The "__metadata__" map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  // Size of the whole file in bytes.
  size_t file_size() const { return size_; }

 private:
  struct Entry {
    TensorView view;         // data is set for supported and unsupported dtypes alike
    std::string dtype_name;  // as written in the header
    bool supported = false;  // view.dtype is meaningful only when true
  };

  SafetensorsFile(std::string path, const char* base, size_t size)
      : path_(std::move(path)), base_(base), size_(size) {}

  // Parses and validates the header; fills entries_, names_ and metadata_.
  absl::Status ParseHeader();

  std::string path_;
  const char* base_ = nullptr;  // start of the read-only mapping (or of owned_)
  size_t size_ = 0;             // mapping length == file size
  std::unique_ptr<char[]> owned_;  // FromBytes only; then nothing is mapped
  absl::flat_hash_map<std::string, Entry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_SAFETENSORS_FILE_H_
