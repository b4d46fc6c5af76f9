#include "server/listen_address.h"

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace vismoe::server {

absl::Status CheckHostPort(absl::string_view option, absl::string_view address) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("option ", option, ": invalid value \"", address, "\": ", why));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return bad("expected host:port");
  const absl::string_view port = address.substr(colon + 1);
  int number = -1;
  if (port.empty() || port.size() > 5 || !absl::c_all_of(port, absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &number) || number > 65535) {
    return bad("the port must be a number in 1-65535 (or 0 for any free port)");
  }
  return absl::OkStatus();
}

}  // namespace vismoe::server
