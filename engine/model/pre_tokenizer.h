// Pre-tokeniser of a Hugging Face tokenizer.json ("pre_tokenizer" field):
// splits normalised text into the pieces BPE runs on. Supports Split (Regex or
// String pattern, all five behaviours, invert) via PCRE2 and ByteLevel
// (add_prefix_space, use_regex with the GPT-2 pattern), alone or in a
// Sequence whose last step is the single ByteLevel. The byte -> unicode
// mapping of ByteLevel is left to the BPE model, which works on raw bytes.
// Immutable after construction; Split() is safe to call from many threads.
#ifndef VISMOE_ENGINE_MODEL_PRE_TOKENIZER_H_
#define VISMOE_ENGINE_MODEL_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace vismoe {

class PreTokenizer {
 public:
  // `spec` is the JSON value of the "pre_tokenizer" field. It must contain
  // exactly one ByteLevel step, as the last step.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& spec);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the non-empty pieces of `text` to *pieces.
  // REQUIRES: `text` is valid UTF-8.
  void Split(absl::string_view text, std::vector<std::string>* pieces) const;

  class Step;  // one pre-tokenisation step (defined in the .cc)

 private:
  PreTokenizer() = default;
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_PRE_TOKENIZER_H_
