#include "engine/model/generation_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

// Appends the ids of an "eos_token_id" field (an int or a list of ints).
absl::Status ReadEosIds(const nlohmann::json& v, const std::string& where, std::vector<int>* out) {
  if (v.is_number_integer()) {
    out->push_back(v.get<int>());
    return absl::OkStatus();
  }
  if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) break;
      out->push_back(e.get<int>());
    }
    if (out->size() == v.size()) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": eos_token_id must be an integer or a list of integers"));
}

}  // namespace

absl::StatusOr<std::vector<int>> LoadEosIds(const std::string& dir) {
  std::vector<int> ids;
  for (const char* file : {"generation_config.json", "config.json"}) {
    const std::string path = absl::StrCat(dir, "/", file);
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
    }
    const nlohmann::json* v = nullptr;
    if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
      v = &j["eos_token_id"];
    } else if (j.contains("text_config") && j["text_config"].is_object() &&
               j["text_config"].contains("eos_token_id")) {
      v = &j["text_config"]["eos_token_id"];
    }
    if (v == nullptr) continue;
    VISMOE_RETURN_IF_ERROR(ReadEosIds(*v, path, &ids));
    return ids;
  }
  return ids;
}

}  // namespace vismoe
