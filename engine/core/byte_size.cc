#include "engine/core/byte_size.h"

#include <cmath>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace vismoe {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t split = 0;
  while (split < s.size() && (absl::ascii_isdigit(s[split]) || s[split] == '.')) ++split;
  const absl::string_view number = s.substr(0, split);
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(split)));
  static const std::map<std::string, double> kUnits = {
      {"", 1},           {"b", 1},
      {"kb", 1e3},       {"mb", 1e6},
      {"gb", 1e9},       {"tb", 1e12},
      {"kib", 1024.0},   {"mib", 1048576.0},
      {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"k", 1024.0},     {"m", 1048576.0},
      {"g", 1073741824.0}, {"t", 1099511627776.0}};
  auto it = kUnits.find(unit);
  double value = 0;
  if (number.empty() || it == kUnits.end() || !absl::SimpleAtod(number, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a byte size such as 4096, 512MiB, 12.5M or 24GB, got \"", text,
                     "\""));
  }
  const double bytes = value * it->second;
  if (!std::isfinite(bytes) || bytes >= 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat("byte size \"", text, "\" is too large"));
  }
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace vismoe
