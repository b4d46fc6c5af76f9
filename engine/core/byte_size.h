// Parses human byte sizes for flags and config files ("4096", "512MiB",
// "24GB", "12.5M"): one parser for the server, vismoe-bench and
// vismoe-calibrate. KB/MB/GB/TB are decimal, KiB/MiB/GiB/TiB binary, and the
// single letters K/M/G/T binary (as in `--budget=12.5M`); case-insensitive.
// Thread safety: pure function.
#ifndef VISMOE_ENGINE_CORE_BYTE_SIZE_H_
#define VISMOE_ENGINE_CORE_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vismoe {

// InvalidArgument quoting the text when it is not a non-negative size or is
// too large for int64.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_BYTE_SIZE_H_
