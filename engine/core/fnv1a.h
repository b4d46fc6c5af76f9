// Fnv1a: a 64-bit FNV-1a hash of a string, the same in every build and on
// every machine (unlike std::hash or absl::Hash): for seeds derived from
// names -- synthetic tensors, calibration requests -- that must not change
// between runs.
// Thread safety: a pure function.
#ifndef VISMOE_ENGINE_CORE_FNV1A_H_
#define VISMOE_ENGINE_CORE_FNV1A_H_

#include <cstdint>
#include <string_view>

namespace vismoe {

inline uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_FNV1A_H_
