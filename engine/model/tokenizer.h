// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, giving
// the same ids as the `tokenizers` library for the features Qwen2/Qwen3 use:
// added tokens (cut out first), NFC normaliser, Split-regex + ByteLevel
// pre-tokeniser, BPE with ranked merges, ByteLevel decoder. Files with other
// model, normaliser, pre-tokeniser or decoder kinds are rejected at Load with a
// Status naming the field.
// Thread-safe: all methods are const and may be called concurrently.
#ifndef VISMOE_ENGINE_MODEL_TOKENIZER_H_
#define VISMOE_ENGINE_MODEL_TOKENIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/model/added_vocabulary.h"
#include "engine/model/bpe_model.h"
#include "engine/model/normalizer.h"
#include "engine/model/pre_tokenizer.h"

namespace vismoe {

class Tokenizer {
 public:
  // Reads <checkpoint_dir>/tokenizer.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& checkpoint_dir);
  // Builds from the text of a tokenizer.json; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJsonText(absl::string_view json_text,
                                                                 const std::string& source);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Whether Encode cuts added tokens (special or not) out of the text.
  enum class AddedTokens {
    kMatch,   // "<|im_end|>" in the text becomes the <|im_end|> id
    kIgnore,  // added tokens are ordinary text: BPE of its bytes (untrusted input)
  };

  // Token ids of `text`; added tokens written in the text (e.g. "<|im_end|>")
  // are recognised unless `added` is kIgnore; no BOS/EOS is added. Invalid
  // UTF-8 is first repaired to U+FFFD (the only way such text reaches
  // `tokenizers`, via a Python str).
  std::vector<int> Encode(absl::string_view text, AddedTokens added = AddedTokens::kMatch) const;

  // Encode with added tokens recognised only where they lie wholly outside the
  // `untrusted` byte ranges (ascending, disjoint): text a chat template copied
  // from a message is ordinary text however it is spelled. Equals Encode(text)
  // when no added token overlaps an untrusted range. A run of plain text that
  // holds untrusted bytes skips the normalised added-token pass. REQUIRES:
  // text is valid UTF-8.
  std::vector<int> EncodeMarked(absl::string_view text,
                                absl::Span<const std::pair<size_t, size_t>> untrusted) const;

  // Text of `ids`; unknown ids are skipped and invalid UTF-8 in the result
  // becomes U+FFFD, as in tokenizers.
  std::string Decode(absl::Span<const int> ids, bool skip_special = false) const;

  // The raw bytes that token `id` decodes to (possibly part of a UTF-8
  // character); empty for unknown ids.
  const std::string& TokenBytes(int id) const;

  int TokenToId(absl::string_view token) const;                             // -1 if unknown
  std::string IdToToken(int id) const;                                      // "" if unknown
  int vocab_size() const { return static_cast<int>(token_bytes_.size()); }  // max id + 1
  bool IsSpecial(int id) const;
  const AddedVocabulary& added_vocabulary() const { return added_; }

 private:
  Tokenizer() = default;
  void EncodePlain(absl::string_view text, std::vector<int>* ids) const;
  // Normalised text: its normalized=true added tokens, then BPE of the rest.
  void EncodeNormalized(absl::string_view norm, std::vector<int>* ids) const;

  Normalizer normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;
  std::vector<std::string> token_bytes_;  // decoded bytes per id
  std::vector<bool> special_;             // per id
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_TOKENIZER_H_
