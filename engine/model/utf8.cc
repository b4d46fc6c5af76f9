#include "engine/model/utf8.h"

namespace vismoe::utf8 {
namespace {

bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

}  // namespace

Unit ScanUnit(absl::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {Unit::Kind::kValid, 1};
  size_t need;                   // total bytes of the sequence
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (InRange(b0, 0xC2, 0xDF)) {
    need = 2;
  } else if (b0 == 0xE0) {
    need = 3, lo = 0xA0;
  } else if (InRange(b0, 0xE1, 0xEC) || InRange(b0, 0xEE, 0xEF)) {
    need = 3;
  } else if (b0 == 0xED) {
    need = 3, hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 4, lo = 0x90;
  } else if (InRange(b0, 0xF1, 0xF3)) {
    need = 4;
  } else if (b0 == 0xF4) {
    need = 4, hi = 0x8F;
  } else {
    return {Unit::Kind::kInvalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= s.size()) return {Unit::Kind::kIncomplete, i};
    const auto b = static_cast<uint8_t>(s[pos + i]);
    const bool ok = i == 1 ? InRange(b, lo, hi) : InRange(b, 0x80, 0xBF);
    if (!ok) return {Unit::Kind::kInvalid, i};
  }
  return {Unit::Kind::kValid, need};
}

void AppendLossy(absl::string_view s, std::string* out) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t run = pos;  // copy runs of valid units in one append
    Unit u{Unit::Kind::kValid, 0};
    while (run < s.size()) {
      u = ScanUnit(s, run);
      if (u.kind != Unit::Kind::kValid) break;
      run += u.length;
    }
    out->append(s.data() + pos, run - pos);
    if (run >= s.size()) break;
    out->append(kReplacement.data(), kReplacement.size());
    pos = run + u.length;
  }
}

std::string Lossy(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendLossy(s, &out);
  return out;
}

bool IsValid(absl::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const Unit u = ScanUnit(s, pos);
    if (u.kind != Unit::Kind::kValid) return false;
    pos += u.length;
  }
  return true;
}

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t DecodeAt(absl::string_view s, size_t pos, size_t len) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[pos + i]); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    case 3:
      return ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    default:
      return ((b(0) & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) |
             (b(3) & 0x3Fu);
  }
}

}  // namespace vismoe::utf8
