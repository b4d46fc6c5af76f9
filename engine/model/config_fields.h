// Internal to engine/model's config parsing (model_config.cc and
// model_config_families.cc): the typed JSON field reader whose errors name
// the field's path, and the parsers the two files share.
//
// Thread safety: plain functions and a stack-only reader.
#ifndef VISMOE_ENGINE_MODEL_CONFIG_FIELDS_H_
#define VISMOE_ENGINE_MODEL_CONFIG_FIELDS_H_

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/model_config.h"
#include "nlohmann/json.hpp"

namespace vismoe::config_internal {

using nlohmann::json;

// Reads typed fields from one JSON object; errors carry the field's path.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  bool Has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }

  absl::Status Int(const char* key, int* out, bool required, int min_value = 0) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    const json& v = obj_[key];
    if (!v.is_number_integer()) return Bad(key, "an integer");
    const int64_t x = v.get<int64_t>();
    if (x < min_value || x > (int64_t{1} << 31) - 1) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", Path(key), " = ", x,
                                                     " is out of range (>= ", min_value, ")"));
    }
    *out = static_cast<int>(x);
    return absl::OkStatus();
  }

  absl::Status Float(const char* key, float* out, bool required) const {
    double d = *out;
    VISMOE_RETURN_IF_ERROR(Double(key, &d, required));
    *out = static_cast<float>(d);
    return absl::OkStatus();
  }

  absl::Status Double(const char* key, double* out, bool required) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    if (!obj_[key].is_number()) return Bad(key, "a number");
    *out = obj_[key].get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, bool* out, bool required) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    if (!obj_[key].is_boolean()) return Bad(key, "a boolean");
    *out = obj_[key].get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const char* key, std::string* out, bool required) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    if (!obj_[key].is_string()) return Bad(key, "a string");
    *out = obj_[key].get<std::string>();
    return absl::OkStatus();
  }

  absl::Status IntList(const char* key, std::vector<int>* out, bool required) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    const json& v = obj_[key];
    if (!v.is_array()) return Bad(key, "a list of integers");
    out->clear();
    for (const json& e : v) {
      if (!e.is_number_integer()) return Bad(key, "a list of integers");
      out->push_back(e.get<int>());
    }
    return absl::OkStatus();
  }

  absl::Status FloatList(const char* key, std::vector<float>* out, bool required) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    const json& v = obj_[key];
    if (!v.is_array()) return Bad(key, "a list of numbers");
    out->clear();
    for (const json& e : v) {
      if (!e.is_number() || !std::isfinite(e.get<double>())) return Bad(key, "a list of numbers");
      out->push_back(static_cast<float>(e.get<double>()));
    }
    return absl::OkStatus();
  }

  std::string Path(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

 private:
  absl::Status Missing(const char* key) const {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: required field '", Path(key), "' is missing"));
  }
  absl::Status Bad(const char* key, const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field '", Path(key), "' must be ", what));
  }

  const json& obj_;
  std::string prefix_;
};

inline absl::Status Inconsistent(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: inconsistent config: ", what));
}

// hidden_size, num_hidden_layers and num_attention_heads (required).
absl::Status ParseTextShape(const FieldReader& r, TextConfig* t);
// rms_norm_eps and vocab_size (required), max_position_embeddings,
// attention_bias and tie_word_embeddings (kept as `t` holds them when absent).
absl::Status ParseTextCommon(const FieldReader& r, TextConfig* t);

// Rope fields of the text config `tc` (rope_theta, and rope_scaling or
// rope_parameters: default, mrope, longrope or yarn) into `t`.
absl::Status ParseRope(const json& tc, const std::string& prefix, TextConfig* t);

// The text configs of the families whose config.json is not Qwen3's layout
// (model_config_families.cc), read from the top level.
absl::Status ParseDeepseek(const json& root, bool v3, TextConfig* t);
absl::Status ParseGptOss(const json& root, TextConfig* t);
// DeepSeek-VL2's language_config, as its published modeling_deepseek reads
// it (engine/model/deepseek_vl2.md).
absl::Status ParseDeepseekVl2(const json& root, TextConfig* t);

}  // namespace vismoe::config_internal

#endif  // VISMOE_ENGINE_MODEL_CONFIG_FIELDS_H_
