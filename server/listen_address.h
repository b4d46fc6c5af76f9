// The one check of a listening address ("host:port") for the gRPC server and
// the metrics endpoint, so a bad port is refused at start-up, naming the
// option, instead of gRPC taking 99999 modulo 65536 or picking a random port.
//
// Thread safety: stateless free function.
#ifndef VISMOE_SERVER_LISTEN_ADDRESS_H_
#define VISMOE_SERVER_LISTEN_ADDRESS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace vismoe::server {

// OK for "host:port" with a non-empty host (IPv6 in brackets) and a decimal
// port in [0, 65535] (0: any free port); InvalidArgument "option <option>:
// invalid value ..." otherwise.
absl::Status CheckHostPort(absl::string_view option, absl::string_view address);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_LISTEN_ADDRESS_H_
