#include "engine/model/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

using nlohmann::json;

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

// Writes all of `data` or fails.
bool WriteAll(std::FILE* f, const void* data, size_t n) {
  return n == 0 || std::fwrite(data, 1, n, f) == n;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, TensorView>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // Validate and order: decreasing dtype size keeps every tensor aligned without padding.
  std::vector<const std::pair<std::string, TensorView>*> order;
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    const std::string& name = t.first;
    if (name.empty() || name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteSafetensors(", path, "): invalid tensor name '", name, "'"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteSafetensors(", path, "): duplicate tensor name '", name, "'"));
    }
    for (int64_t d : t.second.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("WriteSafetensors(", path, "): tensor '",
                                                       name, "' has shape ",
                                                       t.second.ShapeString()));
      }
    }
    if (t.second.dtype == DType::kMxFp4) {  // no such safetensors dtype: U8 blocks
      return absl::InvalidArgumentError(absl::StrCat("WriteSafetensors(", path, "): tensor '", name,
                                                     "' is MXFP4; write its U8 blocks"));
    }
    if (t.second.numel() > 0 && t.second.data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteSafetensors(", path, "): tensor '", name, "' has no data"));
    }
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const size_t sa = DTypeSize(a->second.dtype), sb = DTypeSize(b->second.dtype);
    if (sa != sb) return sa > sb;
    return a->first < b->first;
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto* t : order) {
    const TensorView& v = t->second;
    header[t->first] = {{"dtype", std::string(DTypeName(v.dtype))},
                        {"shape", v.shape},
                        {"data_offsets", {offset, offset + v.nbytes()}}};
    offset += v.nbytes();
  }
  std::string text;
  try {
    text = header.dump();  // throws on invalid UTF-8 in a name or metadata
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteSafetensors(", path, "): cannot encode header: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return IoError("create", tmp);
  bool ok = WriteAll(f, len, sizeof(len)) && WriteAll(f, text.data(), text.size());
  for (const auto* t : order) {
    if (!ok) break;
    ok = WriteAll(f, t->second.data, t->second.nbytes());
  }
  if (!ok) {
    const absl::Status status = IoError("write", tmp);
    std::fclose(f);
    std::remove(tmp.c_str());
    return status;
  }
  if (std::fclose(f) != 0) {
    const absl::Status status = IoError("close", tmp);
    std::remove(tmp.c_str());
    return status;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status status = IoError("rename " + tmp + " to", path);
    std::remove(tmp.c_str());
    return status;
  }
  return absl::OkStatus();
}

}  // namespace vismoe
