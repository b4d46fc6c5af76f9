#include "client/png_writer.h"

#include <algorithm>
#include <array>
#include <vector>

namespace vismoe::client {
namespace {

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

void PutBigEndian32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

// Appends length, type, payload and CRC (over type + payload) of one chunk.
void PutChunk(std::string* out, const char type[4], const std::string& payload) {
  PutBigEndian32(out, static_cast<uint32_t>(payload.size()));
  const size_t type_at = out->size();
  out->append(type, 4);
  out->append(payload);
  const auto* crc_data = reinterpret_cast<const uint8_t*>(out->data() + type_at);
  PutBigEndian32(out, Crc32(crc_data, 4 + payload.size()));
}

}  // namespace

uint32_t Crc32(const uint8_t* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> kTable = MakeCrcTable();
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = kTable[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t Adler32(const uint8_t* data, size_t size) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < size; ++i) {
    a = (a + data[i]) % kMod;
    b = (b + a) % kMod;
  }
  return (b << 16) | a;
}

std::string EncodePngRgb(int width, int height, const uint8_t* rgb) {
  // Raw scanlines: filter byte 0 (None) then the row's pixels.
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((row_bytes + 1) * static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const uint8_t* row = rgb + static_cast<size_t>(y) * row_bytes;
    raw.insert(raw.end(), row, row + row_bytes);
  }

  // zlib stream: header (deflate, 32K window, no preset dict; 0x7801 % 31 == 0),
  // stored blocks of at most 65535 bytes, Adler-32 trailer.
  std::string zlib;
  zlib.push_back(0x78);
  zlib.push_back(0x01);
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    zlib.push_back(last ? 1 : 0);  // BFINAL, BTYPE=00 (stored)
    zlib.push_back(static_cast<char>(n & 0xFF));
    zlib.push_back(static_cast<char>(n >> 8));
    zlib.push_back(static_cast<char>(~n & 0xFF));
    zlib.push_back(static_cast<char>((~n >> 8) & 0xFF));
    zlib.append(reinterpret_cast<const char*>(raw.data() + pos), n);
    pos += n;
  } while (pos < raw.size());
  PutBigEndian32(&zlib, Adler32(raw.data(), raw.size()));

  std::string ihdr;
  PutBigEndian32(&ihdr, static_cast<uint32_t>(width));
  PutBigEndian32(&ihdr, static_cast<uint32_t>(height));
  ihdr.push_back(8);  // bit depth
  ihdr.push_back(2);  // colour type: truecolour RGB
  ihdr.push_back(0);  // compression: deflate
  ihdr.push_back(0);  // filter method 0
  ihdr.push_back(0);  // no interlace

  std::string png("\x89PNG\r\n\x1a\n", 8);
  PutChunk(&png, "IHDR", ihdr);
  PutChunk(&png, "IDAT", zlib);
  PutChunk(&png, "IEND", std::string());
  return png;
}

}  // namespace vismoe::client
