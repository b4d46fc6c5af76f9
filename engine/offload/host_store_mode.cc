#include "engine/offload/host_store_mode.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace vismoe {

int64_t PageLockedHeadroom(int64_t available_bytes) {
  constexpr int64_t kMinHeadroom = int64_t{4} << 30;
  return std::max(kMinHeadroom, available_bytes / 10);
}

bool MapHostExperts(HostStoreMode mode, bool page_locked, int64_t packed_bytes,
                    int64_t available_bytes) {
  switch (mode) {
    case HostStoreMode::kMapped:
      return true;
    case HostStoreMode::kPacked:
      return false;
    case HostStoreMode::kAuto:
      break;
  }
  if (!page_locked) return true;
  if (available_bytes <= 0) return false;
  return packed_bytes > available_bytes - PageLockedHeadroom(available_bytes);
}

int64_t HostMemoryAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  constexpr absl::string_view kKey = "MemAvailable:";
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, kKey)) continue;
    // "MemAvailable:   12345678 kB"
    absl::string_view rest =
        absl::StripAsciiWhitespace(absl::string_view(line).substr(kKey.size()));
    if (!absl::ConsumeSuffix(&rest, " kB")) return 0;
    int64_t kib = 0;
    return absl::SimpleAtoi(rest, &kib) && kib > 0 ? kib * 1024 : 0;
  }
  return 0;
}

}  // namespace vismoe
