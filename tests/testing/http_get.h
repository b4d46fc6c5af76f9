// A tiny blocking HTTP/1.0 client for tests that talk to local HTTP servers
// (the metrics exposer, a child Prometheus). Loopback only, no TLS, no
// redirects, no chunked encoding (HTTP/1.0 responses end at connection close).
#ifndef VISMOE_TESTS_TESTING_HTTP_GET_H_
#define VISMOE_TESTS_TESTING_HTTP_GET_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace vismoe::testing {

struct HttpResponse {
  int status = 0;                              // e.g. 200
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// GET http://<host>:<port><target>. `host` is a numeric IPv4 address
// ("127.0.0.1"); `target` starts with '/' and is sent as is (encode queries
// with UrlEncode). Unavailable when the connection is refused or the whole
// exchange takes longer than `timeout`; Internal on a malformed response.
absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& target,
                                     absl::Duration timeout = absl::Seconds(10));

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string UrlEncode(absl::string_view s);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then
// released). Racy by nature; fine for tests that start a child server on it.
absl::StatusOr<int> PickUnusedLoopbackPort();

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_HTTP_GET_H_
