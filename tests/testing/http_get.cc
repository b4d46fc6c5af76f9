#include "tests/testing/http_get.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace vismoe::testing {
namespace {

// Closes the descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitFor(int fd, short events, absl::Time deadline, const std::string& what) {
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::UnavailableError(absl::StrCat("timed out ", what));
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll failed ", what, ": ", strerror(errno)));
    }
  }
}

absl::StatusOr<HttpResponse> ParseResponse(const std::string& raw, const std::string& url) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) {
    return absl::InternalError(absl::StrCat("GET ", url, ": response has no header end"));
  }
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, end), "\r\n");
  // Status line: HTTP/1.x NNN reason
  std::vector<std::string> first = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  HttpResponse resp;
  if (first.size() < 2 || !absl::StartsWith(first[0], "HTTP/") ||
      !absl::SimpleAtoi(first[1], &resp.status)) {
    return absl::InternalError(absl::StrCat("GET ", url, ": bad status line '", lines[0], "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    resp.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  resp.body = raw.substr(end + 4);
  return resp;
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& target,
                                     absl::Duration timeout) {
  const std::string url = absl::StrCat("http://", host, ":", port, target);
  const absl::Time deadline = absl::Now() + timeout;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (port <= 0 || port > 65535 || inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("GET ", url, ": bad IPv4 host or port"));
  }
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));

  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrCat("GET ", url, ": connect: ", strerror(errno)));
    }
    if (absl::Status s = WaitFor(fd.get(), POLLOUT, deadline, "connecting to " + url); !s.ok()) {
      return s;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return absl::UnavailableError(absl::StrCat("GET ", url, ": connect: ", strerror(err)));
    }
  }

  const std::string request = absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: ", host, ":", port,
                                           "\r\nAccept: */*\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    if (absl::Status s = WaitFor(fd.get(), POLLOUT, deadline, "sending to " + url); !s.ok()) {
      return s;
    }
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("GET ", url, ": send: ", strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }

  std::string raw;
  char buf[16384];
  while (true) {
    if (absl::Status s = WaitFor(fd.get(), POLLIN, deadline, "reading from " + url); !s.ok()) {
      return s;
    }
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("GET ", url, ": recv: ", strerror(errno)));
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  return ParseResponse(raw, url);
}

std::string UrlEncode(absl::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

absl::StatusOr<int> PickUnusedLoopbackPort() {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError(absl::StrCat("getsockname: ", strerror(errno)));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace vismoe::testing
