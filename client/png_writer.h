// Minimal PNG encoder for the load generator's synthetic images. The client
// must not link OpenCV (or the engine), so it writes 8-bit RGB PNGs itself with
// uncompressed ("stored") deflate blocks: larger files, trivially correct.
#ifndef VISMOE_CLIENT_PNG_WRITER_H_
#define VISMOE_CLIENT_PNG_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace vismoe::client {

// CRC-32 (ISO 3309, as used by PNG chunks) of `data[0, size)`, continuing from
// `crc` (0 for a fresh checksum).
uint32_t Crc32(const uint8_t* data, size_t size, uint32_t crc = 0);

// Adler-32 (zlib trailer) of `data[0, size)`.
uint32_t Adler32(const uint8_t* data, size_t size);

// Encodes a row-major RGB image (height * width * 3 bytes) as a PNG file.
// REQUIRES: width > 0, height > 0, `rgb` holds height * width * 3 bytes.
std::string EncodePngRgb(int width, int height, const uint8_t* rgb);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_PNG_WRITER_H_
