#include "engine/model/safetensors_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/optional.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

using nlohmann::json;

// Bits per element of every dtype the safetensors format defines. Bits, not
// bytes, because of the packed sub-byte float formats.
absl::optional<uint32_t> DTypeBits(const std::string& name) {
  static const auto* const kBits = new std::map<std::string, uint32_t>{
      {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
      {"I32", 32},    {"U32", 32}, {"F32", 32}, {"I64", 64},    {"U64", 64},
      {"F64", 64},    {"C64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = kBits->find(name);
  if (it == kBits->end()) return absl::nullopt;
  return it->second;
}

absl::Status ErrnoError(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// One tensor's header entry, validated on its own (bounds against the data section
// included; overlap and alignment need the other tensors and the header length).
struct TensorDesc {
  std::string dtype;
  Shape shape;
  uint64_t nbytes = 0;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;
};

// Errors are bare messages; the caller prefixes the file and tensor name.
absl::StatusOr<TensorDesc> ParseTensorDesc(const json& desc, uint64_t data_size) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (!desc.is_object()) return bad("description is not a JSON object");
  TensorDesc t;

  if (!desc.contains("dtype") || !desc["dtype"].is_string()) {
    return bad("missing or non-string \"dtype\"");
  }
  t.dtype = desc["dtype"].get<std::string>();
  const absl::optional<uint32_t> bits = DTypeBits(t.dtype);
  if (!bits.has_value()) return bad(absl::StrCat("unknown dtype '", t.dtype, "'"));

  if (!desc.contains("shape") || !desc["shape"].is_array()) {
    return bad("missing or non-list \"shape\"");
  }
  const json& shape = desc["shape"];
  constexpr uint64_t kMaxDim = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_integer()) {
      return bad(absl::StrCat("shape entry ", d.dump(), " is not an integer"));
    }
    if (!d.is_number_unsigned()) {  // nlohmann stores only negative literals as signed
      return bad(absl::StrCat("shape has negative dimension ", d.dump()));
    }
    const uint64_t dim = d.get<uint64_t>();
    if (dim > kMaxDim || __builtin_mul_overflow(numel, dim, &numel) || numel > kMaxDim) {
      return bad(absl::StrCat("shape ", shape.dump(), " overflows"));
    }
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t total_bits = 0;
  if (__builtin_mul_overflow(numel, uint64_t{*bits}, &total_bits)) {
    return bad(absl::StrCat("shape ", shape.dump(), " overflows"));
  }
  if (total_bits % 8 != 0) {
    return bad(absl::StrCat(numel, " elements of ", t.dtype, " do not fill whole bytes"));
  }
  t.nbytes = total_bits / 8;

  const json* offsets = desc.contains("data_offsets") ? &desc["data_offsets"] : nullptr;
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return bad("\"data_offsets\" must be two non-negative integers [begin, end]");
  }
  t.begin = (*offsets)[0].get<uint64_t>();
  t.end = (*offsets)[1].get<uint64_t>();
  const std::string range = absl::StrCat("data_offsets [", t.begin, ", ", t.end, "]");
  if (t.begin > t.end) return bad(absl::StrCat(range, " have begin > end"));
  if (t.end > data_size) {
    return bad(
        absl::StrCat(range, " exceed the data section of ", data_size, " bytes (file truncated?)"));
  }
  if (t.end - t.begin != t.nbytes) {
    return bad(absl::StrCat(range, " span ", t.end - t.begin, " bytes but shape [",
                            absl::StrJoin(t.shape, ", "), "] of ", t.dtype, " needs ", t.nbytes));
  }
  return t;
}

// One tensor's byte range inside the data section, for the tiling check.
struct Range {
  uint64_t begin;
  uint64_t end;
  std::string name;
};

// Tensors must tile [0, data_size) exactly: no overlap, no hole, no trailing bytes.
// Errors are bare messages; the caller prefixes the file.
absl::Status CheckTiling(std::vector<Range> ranges, uint64_t data_size) {
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t cursor = 0;
  const std::string* previous = nullptr;  // last non-empty tensor
  for (const Range& r : ranges) {
    if (r.begin < cursor) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", r.name, "': data_offsets [",
                                                     r.begin, ", ", r.end, "] overlap tensor '",
                                                     *previous, "'"));
    }
    if (r.begin > cursor) {
      return absl::InvalidArgumentError(absl::StrCat("data section has ", r.begin - cursor,
                                                     " unused bytes before tensor '", r.name, "'"));
    }
    cursor = r.end;
    if (r.end > r.begin) previous = &r.name;
  }
  if (cursor != data_size) {
    return absl::InvalidArgumentError(absl::StrCat("data section has ", data_size - cursor,
                                                   " trailing bytes not covered by any tensor"));
  }
  return absl::OkStatus();
}

absl::Status TooShort(const std::string& path, size_t size) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": file is ", size, " bytes, too short for the 8-byte safetensors header length"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("cannot open safetensors file ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return TooShort(path, size);
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (base == MAP_FAILED) return ErrnoError(mmap_errno, absl::StrCat("cannot mmap ", path));

  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(path, static_cast<const char*>(base), size));
  VISMOE_RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string label, absl::string_view bytes) {
  if (bytes.size() < 8) return TooShort(label, bytes.size());
  auto copy = std::make_unique_for_overwrite<char[]>(bytes.size());
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(std::move(label), copy.get(), bytes.size()));
  file->owned_ = std::move(copy);
  VISMOE_RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_ != nullptr && owned_ == nullptr) ::munmap(const_cast<char*>(base_), size_);
}

absl::Status SafetensorsFile::ParseHeader() {
  auto error = [this](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  };
  auto tensor_error = [this](const std::string& name, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "': ", what));
  };

  // Little-endian regardless of the host.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<unsigned char>(base_[i]);
  }
  if (header_len > kMaxHeaderBytes) {
    return error(absl::StrCat("header length ", header_len, " exceeds the ", kMaxHeaderBytes,
                              "-byte limit (corrupt file?)"));
  }
  if (header_len > size_ - 8) {
    return error(absl::StrCat("header length ", header_len, " runs past the end of the file (",
                              size_, " bytes)"));
  }

  json header;
  try {
    header = json::parse(base_ + 8, base_ + 8 + header_len);
  } catch (const json::exception& e) {
    return error(absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) {
    return error(absl::StrCat("header is not a JSON object (got ", header.type_name(), ")"));
  }

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size_ - data_start;
  std::vector<Range> ranges;
  for (const auto& [name, desc] : header.items()) {
    if (name == "__metadata__") {
      if (!desc.is_object()) return error("__metadata__ is not a JSON object");
      for (const auto& [key, value] : desc.items()) {
        if (!value.is_string()) {
          return error(absl::StrCat("__metadata__ value for '", key, "' is not a string"));
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    absl::StatusOr<TensorDesc> t = ParseTensorDesc(desc, data_size);
    if (!t.ok()) return tensor_error(name, std::string(t.status().message()));

    Entry entry;
    entry.dtype_name = t->dtype;
    entry.view.shape = t->shape;
    entry.view.data = base_ + data_start + t->begin;
    absl::StatusOr<DType> dtype = ParseDType(t->dtype);
    entry.supported = dtype.ok();
    if (entry.supported) {
      entry.view.dtype = *dtype;
      // The mapping is page aligned, so the file offset decides the pointer's alignment.
      const size_t align = DTypeSize(*dtype);
      if (t->nbytes > 0 && (data_start + t->begin) % align != 0) {
        return tensor_error(name, absl::StrCat(t->dtype, " data starts at file offset ",
                                               data_start + t->begin, ", not a multiple of ", align,
                                               " (file written without alignment padding)"));
      }
    }
    entries_.emplace(name, std::move(entry));
    ranges.push_back({t->begin, t->end, name});
  }
  const absl::Status tiling = CheckTiling(std::move(ranges), data_size);
  if (!tiling.ok()) return error(std::string(tiling.message()));

  names_.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names_.push_back(name);
  std::sort(names_.begin(), names_.end());
  return absl::OkStatus();
}

const TensorView* SafetensorsFile::Find(absl::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end() || !it->second.supported) return nullptr;
  return &it->second.view;
}

absl::StatusOr<TensorView> SafetensorsFile::Get(absl::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", path_));
  }
  if (!it->second.supported) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "' has dtype ", it->second.dtype_name,
                     ", which is not supported (supported: F32, F16, BF16, F8_E4M3)"));
  }
  return it->second.view;
}

}  // namespace vismoe
