// UTF-8 helpers shared by the tokenizer and the stream decoder. Invalid input
// is repaired the way Rust's String::from_utf8_lossy does it (one U+FFFD per
// maximal invalid subpart), which is what Hugging Face tokenizers emits.
#ifndef VISMOE_ENGINE_MODEL_UTF8_H_
#define VISMOE_ENGINE_MODEL_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace vismoe::utf8 {

// What starts at a byte position of a UTF-8 string.
struct Unit {
  enum class Kind {
    kValid,       // a complete, well-formed code point of `length` bytes
    kInvalid,     // a maximal invalid subpart of `length` bytes (>= 1)
    kIncomplete,  // a well-formed prefix of `length` bytes cut by the end
  };
  Kind kind;
  size_t length;
};

// Classifies the unit at `pos`. REQUIRES: pos < s.size().
Unit ScanUnit(absl::string_view s, size_t pos);

// Appends `s` to `out`, replacing every invalid or truncated sequence with
// U+FFFD.
void AppendLossy(absl::string_view s, std::string* out);
std::string Lossy(absl::string_view s);

// True when `s` is entirely well-formed UTF-8.
bool IsValid(absl::string_view s);

// Appends the UTF-8 encoding of code point `cp` (REQUIRES: cp <= 0x10FFFF).
void AppendCodePoint(uint32_t cp, std::string* out);

// Decodes the valid code point at `pos` of length `len` (from ScanUnit).
uint32_t DecodeAt(absl::string_view s, size_t pos, size_t len);

inline constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace vismoe::utf8

#endif  // VISMOE_ENGINE_MODEL_UTF8_H_
