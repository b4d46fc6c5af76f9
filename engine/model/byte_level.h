// The GPT-2 byte <-> unicode table used by byte-level BPE: every byte maps to
// a printable code point so that BPE vocabularies can be stored as text.
// Computed, not hand-typed, exactly as bytes_to_unicode() in GPT-2/tokenizers.
#ifndef VISMOE_ENGINE_MODEL_BYTE_LEVEL_H_
#define VISMOE_ENGINE_MODEL_BYTE_LEVEL_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace vismoe::byte_level {

// Code point that byte `b` is written as.
uint32_t ByteToCodePoint(uint8_t b);

// UTF-8 text of ByteToCodePoint(b) for every byte.
const std::array<std::string, 256>& ByteToUtf8();

// Byte written as code point `cp`, or -1 when `cp` is not in the table.
int CodePointToByte(uint32_t cp);

// Maps every byte of `bytes` to its code point (the ByteLevel pre-tokenizer).
std::string Encode(absl::string_view bytes);

// Inverse of Encode for a token string: true and the bytes in *out when every
// code point of `token` is in the table; false otherwise (*out untouched).
bool Decode(absl::string_view token, std::string* out);

}  // namespace vismoe::byte_level

#endif  // VISMOE_ENGINE_MODEL_BYTE_LEVEL_H_
