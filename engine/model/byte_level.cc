#include "engine/model/byte_level.h"

#include "engine/model/utf8.h"

namespace vismoe::byte_level {
namespace {

struct Tables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cp_to_byte{};  // all table code points are < 512

  Tables() {
    cp_to_byte.fill(-1);
    // Printable Latin-1 bytes keep their own code point; the rest are moved,
    // in byte order, to 256, 257, ... (GPT-2 bytes_to_unicode).
    const auto keeps_itself = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = keeps_itself(b) ? static_cast<uint32_t>(b) : next++;
      byte_to_cp[b] = cp;
      cp_to_byte[cp] = static_cast<int16_t>(b);
      utf8::AppendCodePoint(cp, &byte_to_utf8[b]);
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

uint32_t ByteToCodePoint(uint8_t b) { return GetTables().byte_to_cp[b]; }

const std::array<std::string, 256>& ByteToUtf8() { return GetTables().byte_to_utf8; }

int CodePointToByte(uint32_t cp) {
  return cp < GetTables().cp_to_byte.size() ? GetTables().cp_to_byte[cp] : -1;
}

std::string Encode(absl::string_view bytes) {
  const auto& table = ByteToUtf8();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += table[static_cast<uint8_t>(c)];
  return out;
}

bool Decode(absl::string_view token, std::string* out) {
  std::string bytes;
  for (size_t pos = 0; pos < token.size();) {
    const utf8::Unit u = utf8::ScanUnit(token, pos);
    if (u.kind != utf8::Unit::Kind::kValid) return false;
    const int b = CodePointToByte(utf8::DecodeAt(token, pos, u.length));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
    pos += u.length;
  }
  out->append(bytes);
  return true;
}

}  // namespace vismoe::byte_level
