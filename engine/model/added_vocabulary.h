// The added tokens of a Hugging Face tokenizer.json ("added_tokens"): special
// and non-special tokens that are cut out of the text before BPE, with the
// matching rules of tokenizers' AddedVocabulary (leftmost-longest match,
// single_word, lstrip, rstrip; tokens with normalized=false are matched on the
// raw text, normalized=true ones on the normalised text).
// Immutable after construction; thread-safe.
#ifndef VISMOE_ENGINE_MODEL_ADDED_VOCABULARY_H_
#define VISMOE_ENGINE_MODEL_ADDED_VOCABULARY_H_

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/normalizer.h"
#include "nlohmann/json.hpp"

namespace vismoe {

struct AddedToken {
  int id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

class AddedVocabulary {
 public:
  // A byte range of the input and, when it is an added token, its id.
  struct Segment {
    size_t begin;
    size_t end;
    int id;  // -1: plain text
  };

  // `spec` is the "added_tokens" array (may be null). Normalized tokens are
  // matched in their normalised form, computed with `normalizer`.
  static absl::StatusOr<AddedVocabulary> FromJson(const nlohmann::json& spec,
                                                  const Normalizer& normalizer);

  // Splits `text` into plain segments and added tokens of one pass: the raw
  // pass (normalized=false tokens) or the normalised pass (normalized=true).
  // Segments cover `text` in order; empty plain segments are omitted.
  void Split(absl::string_view text, bool normalized_pass, std::vector<Segment>* out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* FindById(int id) const;
  const AddedToken* FindByContent(absl::string_view content) const;

 private:
  // Tokens of one pass, by first byte, longest pattern first.
  struct Matcher {
    std::array<std::vector<int>, 256> by_first_byte;  // indexes into tokens_
    std::vector<std::string> patterns;                // per tokens_ index
    bool empty = true;
  };
  void FindMatches(absl::string_view text, const Matcher& m, std::vector<Segment>* out) const;

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int, int> by_id_;               // id -> tokens_ index
  absl::flat_hash_map<std::string, int> by_content_;  // content -> tokens_ index
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_ADDED_VOCABULARY_H_
