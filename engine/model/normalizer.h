// Text normaliser of a Hugging Face tokenizer.json ("normalizer" field).
// Supports null, NFC, NFD, NFKC, NFKD and Sequence of those (utf8proc);
// anything else is rejected at load. Immutable after construction, so it is
// safe to share between threads.
#ifndef VISMOE_ENGINE_MODEL_NORMALIZER_H_
#define VISMOE_ENGINE_MODEL_NORMALIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace vismoe {

class Normalizer {
 public:
  // `spec` is the JSON value of the "normalizer" field (may be null).
  static absl::StatusOr<Normalizer> FromJson(const nlohmann::json& spec);

  // REQUIRES: `text` is valid UTF-8.
  std::string Apply(absl::string_view text) const;

  bool is_identity() const { return forms_.empty(); }

 private:
  std::vector<int> forms_;  // utf8proc option sets, applied in order
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_NORMALIZER_H_
