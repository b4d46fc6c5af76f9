// Fuzzes tokenizer.json loading (engine/model/tokenizer.h):
// Tokenizer::FromJsonText on arbitrary text; a tokenizer that loads encodes a
// short string with and without added-token matching and decodes the ids.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/model/tokenizer.h"

namespace vismoe {
namespace {

void Fuzz(absl::string_view text) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJsonText(text, "fuzz.json");
  if (!tok.ok()) return;
  // Plain ASCII, a special token, NFC-relevant and multi-byte text, invalid UTF-8.
  constexpr absl::string_view kSample(
      "Hello, world! 123 <|im_start|>user\n  e\xCC\x81t\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xFF!");
  for (Tokenizer::AddedTokens added :
       {Tokenizer::AddedTokens::kMatch, Tokenizer::AddedTokens::kIgnore}) {
    const std::vector<int> ids = (*tok)->Encode(kSample, added);
    for (int id : ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) std::abort();
      (void)(*tok)->IdToToken(id);
      (void)(*tok)->IsSpecial(id);
    }
    (void)(*tok)->Decode(ids, /*skip_special=*/false);
    (void)(*tok)->Decode(ids, /*skip_special=*/true);
  }
}

}  // namespace
}  // namespace vismoe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::Fuzz(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
