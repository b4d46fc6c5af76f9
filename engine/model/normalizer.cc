#include "engine/model/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

absl::Status AddSpec(const nlohmann::json& spec, const std::string& where,
                     std::vector<int>* forms) {
  if (spec.is_null()) return absl::OkStatus();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", where, " must be an object with a string \"type\""));
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    const auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: ", where, ".normalizers must be an array"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      VISMOE_RETURN_IF_ERROR(
          AddSpec((*it)[i], absl::StrCat(where, ".normalizers[", i, "]"), forms));
    }
    return absl::OkStatus();
  }
  constexpr int kStable = UTF8PROC_STABLE;
  if (type == "NFC") {
    forms->push_back(kStable | UTF8PROC_COMPOSE);
  } else if (type == "NFD") {
    forms->push_back(kStable | UTF8PROC_DECOMPOSE);
  } else if (type == "NFKC") {
    forms->push_back(kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  } else if (type == "NFKD") {
    forms->push_back(kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  } else {
    return absl::UnimplementedError(absl::StrCat("tokenizer.json: unsupported ", where, ".type \"",
                                                 type,
                                                 "\" (supported: NFC, NFD, NFKC, NFKD, Sequence)"));
  }
  return absl::OkStatus();
}

bool IsAscii(absl::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& spec) {
  Normalizer n;
  VISMOE_RETURN_IF_ERROR(AddSpec(spec, "normalizer", &n.forms_));
  return n;
}

std::string Normalizer::Apply(absl::string_view text) const {
  // ASCII is invariant under every Unicode normalisation form.
  if (forms_.empty() || IsAscii(text)) return std::string(text);
  std::string current(text);
  for (const int options : forms_) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                     static_cast<utf8proc_ssize_t>(current.size()), &out,
                     static_cast<utf8proc_option_t>(options));
    // Only invalid UTF-8 or out-of-memory fail; the caller guarantees valid
    // input, so on failure the text is kept as is rather than lost.
    if (n >= 0) current.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }
  return current;
}

}  // namespace vismoe
