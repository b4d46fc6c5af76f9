#include "engine/model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace vismoe {
namespace {

using nlohmann::json;

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// A shard must be a plain file name inside the checkpoint directory.
bool IsPlainFileName(const std::string& name) {
  if (name.empty() || name.find("..") != std::string::npos) return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return json::parse(buf.str());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::string clean = dir;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint(clean));

  const std::string single = absl::StrCat(clean, "/", kSingleFile);
  const std::string index = absl::StrCat(clean, "/", kIndexFile);
  if (IsFile(single)) {
    VISMOE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single));
    for (const std::string& name : file->names()) ckpt->shard_of_[name] = file.get();
    ckpt->shards_.push_back(std::move(file));
  } else if (IsFile(index)) {
    VISMOE_RETURN_IF_ERROR(ckpt->OpenIndex(index));
  } else {
    return absl::NotFoundError(absl::StrCat("no ", kSingleFile, " or ", kIndexFile, " in ", clean));
  }
  return ckpt;
}

std::unique_ptr<Checkpoint> Checkpoint::FromMemory(
    std::string label, std::shared_ptr<void> storage,
    std::vector<std::pair<std::string, TensorView>> tensors) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint(std::move(label)));
  ckpt->storage_ = std::move(storage);
  ckpt->in_memory_.reserve(tensors.size());
  for (auto& [name, view] : tensors) ckpt->in_memory_.emplace(std::move(name), std::move(view));
  return ckpt;
}

absl::Status Checkpoint::OpenIndex(const std::string& index_path) {
  auto error = [&index_path](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": ", what));
  };
  VISMOE_ASSIGN_OR_RETURN(const json index, ReadJson(index_path));
  if (!index.is_object()) return error("not a JSON object");
  if (index.contains("metadata") && !index["metadata"].is_object()) {
    return error("\"metadata\" is not a JSON object");
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    return error("missing or non-object \"weight_map\"");
  }

  std::map<std::string, const SafetensorsFile*> by_shard;  // opened once each
  for (const auto& [tensor, shard_json] : index["weight_map"].items()) {
    if (!shard_json.is_string()) {
      return error(absl::StrCat("weight_map entry for '", tensor, "' is not a string"));
    }
    const std::string shard = shard_json.get<std::string>();
    if (!IsPlainFileName(shard)) {
      return error(absl::StrCat("shard name '", shard, "' for tensor '", tensor,
                                "' is not a plain file name in the checkpoint directory"));
    }
    auto it = by_shard.find(shard);
    if (it == by_shard.end()) {
      const std::string shard_path = absl::StrCat(dir_, "/", shard);
      if (!IsFile(shard_path)) {
        return absl::NotFoundError(absl::StrCat(index_path, ": shard '", shard, "' (for tensor '",
                                                tensor, "') does not exist in ", dir_));
      }
      VISMOE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(shard_path));
      it = by_shard.emplace(shard, file.get()).first;
      shards_.push_back(std::move(file));
    }
    if (!it->second->Contains(tensor)) {
      return error(absl::StrCat("weight_map puts tensor '", tensor, "' in shard '", shard,
                                "', which does not contain it"));
    }
    shard_of_[tensor] = it->second;
  }

  // Every tensor may live in one shard only; tensors the map does not list are ignored.
  std::map<std::string, const std::string*> owner;  // tensor -> shard name
  size_t unlisted = 0;
  for (const auto& [shard, file] : by_shard) {
    for (const std::string& name : file->names()) {
      auto [it, inserted] = owner.emplace(name, &shard);
      if (!inserted) {
        return error(absl::StrCat("tensor '", name, "' appears in both shard '", *it->second,
                                  "' and shard '", shard, "'"));
      }
      if (!shard_of_.contains(name)) ++unlisted;
    }
  }
  if (unlisted > 0) {
    spdlog::warn("{}: {} tensor(s) in the shards are not listed in weight_map; ignoring them",
                 index_path, unlisted);
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> Checkpoint::GetAnyDType(absl::string_view name) const {
  if (auto m = in_memory_.find(name); m != in_memory_.end()) return m->second;
  auto it = shard_of_.find(name);
  if (it == shard_of_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", dir_));
  }
  return it->second->Get(name);
}

absl::StatusOr<TensorView> Checkpoint::Get(absl::string_view name) const {
  VISMOE_ASSIGN_OR_RETURN(TensorView view, GetAnyDType(name));
  if (view.dtype == DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is F8_E4M3 in ", dir_,
        ": only linear weights of an FP8 checkpoint (config.json quantization_config with "
        "quant_method fp8, and a weight_scale_inv beside the weight) may be"));
  }
  if (view.dtype == DType::kU8 || view.dtype == DType::kE8M0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is ", std::string(DTypeName(view.dtype)), " in ", dir_,
                     ": only the _blocks and _scales of MXFP4 experts (quantization_config with "
                     "quant_method mxfp4) may be"));
  }
  return view;
}

absl::StatusOr<TensorView> Checkpoint::GetMxfp4(absl::string_view name,
                                                const Shape& expected) const {
  constexpr int64_t kBlock = 32;
  const std::string blocks_name = absl::StrCat(name, "_blocks");
  const std::string scales_name = absl::StrCat(name, "_scales");
  if (expected.size() < 2 || expected.back() % kBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MXFP4 tensor '", blocks_name,
                                                   "': the input dimension must be a multiple of ",
                                                   kBlock, " (in ", dir_, ")"));
  }
  Shape scale_shape(expected.begin(), expected.end() - 1);
  scale_shape.push_back(expected.back() / kBlock);
  Shape block_shape = scale_shape;
  block_shape.push_back(kBlock / 2);
  VISMOE_ASSIGN_OR_RETURN(const TensorView blocks, GetAnyDType(blocks_name));
  VISMOE_ASSIGN_OR_RETURN(const TensorView scales, GetAnyDType(scales_name));
  if (blocks.dtype != DType::kU8) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", blocks_name, "' has dtype ",
                                                   std::string(DTypeName(blocks.dtype)),
                                                   ", expected U8 (in ", dir_, ")"));
  }
  if (scales.dtype != DType::kU8 && scales.dtype != DType::kE8M0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", scales_name, "' has dtype ",
                                                   std::string(DTypeName(scales.dtype)),
                                                   ", expected U8 or F8_E8M0 (in ", dir_, ")"));
  }
  VISMOE_RETURN_IF_ERROR(CheckShape(blocks_name, blocks, block_shape));
  VISMOE_RETURN_IF_ERROR(CheckShape(scales_name, scales, scale_shape));
  TensorView view{blocks.data, DType::kMxFp4, expected};
  view.scale = {scales.data, DType::kE8M0, 1, kBlock};
  // memchr: the 20b model's scales are ~0.6 GB, read at memory speed.
  if (std::memchr(scales.data, 0xff, scales.nbytes()) != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", scales_name, "' in ", dir_, " holds the NaN scale 0xff"));
  }
  return view;
}

absl::StatusOr<size_t> Checkpoint::StoredBytes(absl::string_view name) const {
  VISMOE_ASSIGN_OR_RETURN(TensorView view, GetAnyDType(name));
  return view.nbytes();
}

absl::StatusOr<TensorView> Checkpoint::GetLinear(absl::string_view name, const Shape& expected,
                                                 const std::optional<QuantBlock>& block) const {
  if (!block.has_value()) return Get(name, expected);
  VISMOE_ASSIGN_OR_RETURN(TensorView view, GetAnyDType(name));
  if (view.dtype != DType::kF8E4M3) return Get(name, expected);
  VISMOE_RETURN_IF_ERROR(CheckShape(name, view, expected));
  if (view.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is F8_E4M3 but not a matrix (in ", dir_, ")"));
  }
  const std::string scale_name = absl::StrCat(name, "_scale_inv");
  if (!Has(scale_name)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is F8_E4M3 but ",
                                                   scale_name, " is missing (in ", dir_, ")"));
  }
  Shape scale_shape(expected.begin(), expected.end() - 2);
  scale_shape.push_back(CeilDiv(expected[expected.size() - 2], block->rows));
  scale_shape.push_back(CeilDiv(expected.back(), block->cols));
  VISMOE_ASSIGN_OR_RETURN(const TensorView scale, Get(scale_name, scale_shape));
  if (scale.dtype != DType::kF32 && scale.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", scale_name, "' has dtype ",
                                                   std::string(DTypeName(scale.dtype)),
                                                   "; block scales must be F32 or BF16"));
  }
  VISMOE_RETURN_IF_ERROR(CheckFinite(*this, scale_name, scale));
  view.scale = {scale.data, scale.dtype, block->rows, block->cols};
  return view;
}

absl::Status Checkpoint::CheckShape(absl::string_view name, const TensorView& view,
                                    const Shape& expected) const {
  if (view.shape == expected) return absl::OkStatus();
  const TensorView want{nullptr, view.dtype, expected};
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                 view.ShapeString(), ", expected ",
                                                 want.ShapeString(), " (in ", dir_, ")"));
}

absl::StatusOr<TensorView> Checkpoint::Get(absl::string_view name, const Shape& expected) const {
  VISMOE_ASSIGN_OR_RETURN(TensorView view, Get(name));
  VISMOE_RETURN_IF_ERROR(CheckShape(name, view, expected));
  return view;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(shard_of_.size() + in_memory_.size());
  for (const auto& [name, shard] : shard_of_) names.push_back(name);
  for (const auto& [name, view] : in_memory_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status CheckFinite(const Checkpoint& checkpoint, const std::string& name,
                         const TensorView& view) {
  const int64_t bad = FirstNonFinite(view.dtype, view.data, static_cast<size_t>(view.numel()));
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(checkpoint.dir(), ": tensor ", name,
                                                 " holds a NaN or an infinity at element ", bad));
}

}  // namespace vismoe
