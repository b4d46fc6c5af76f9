// HttpApi: the OpenAI-compatible HTTP front end of the daemon (--http_listen),
// beside gRPC: same engine, scheduler, admission control, limits, API key and
// metrics (api="http"). Routes (docs: server/openai_api.md):
//
//   POST /v1/chat/completions   OpenAI Chat Completions, streamed as
//                               Server-Sent Events when "stream": true
//   GET  /v1/models             the one model served
//   GET  /health                200 while serving, 503 while loading or
//                               shutting down (no API key needed)
//
// Built on cpp-httplib (Debian's libcpp-httplib): one thread per connection
// from a fixed pool (Options::threads), so a connection that stalls is
// dropped after kIoTimeout (an idle keep-alive one after kKeepAliveTimeout)
// and cannot hold a thread longer; the
// engine never waits for a client (streamed text waits in the request's own
// buffer). A body is read only after the API key is checked, and never more
// than Options::max_body_bytes of it (413). A streaming client that
// disconnects cancels its request within kPollInterval (the socket is
// watched between tokens); a non-streamed request runs to its end, bounded by
// max_tokens and Options::request_timeout (504).
//
// Thread safety: Attach, SetServing and Stop may be called from any thread.
// Ownership: owns its listener and threads; borrows the metrics and, after
// Attach, the backend, which must outlive Stop().
#ifndef VISMOE_SERVER_HTTP_API_H_
#define VISMOE_SERVER_HTTP_API_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics.h"
#include "server/serving_backend.h"

namespace httplib {
class Server;
class ContentReader;
struct Request;
struct Response;
}  // namespace httplib

namespace vismoe::server {

class HttpApi {
 public:
  // How long a connection may stay silent while the server reads a request,
  // and how long one write may block.
  static constexpr absl::Duration kIoTimeout = absl::Seconds(5);
  // How long an idle keep-alive connection is kept for its next request.
  static constexpr absl::Duration kKeepAliveTimeout = absl::Seconds(2);
  // How often a streamed request checks that its client is still there.
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

  struct Options {
    std::string listen;   // "host:port"; port 0 = any free
    int threads = 64;     // connections served at once
    std::string api_key;  // "" = no authentication
    int64_t max_body_bytes = 64LL << 20;
    // max_tokens of a request that names none (OpenAI: "up to the limit").
    int default_max_tokens = 4096;
    absl::Duration request_timeout = absl::Minutes(10);
    std::string model_name;  // the id of /v1/models
  };

  // Binds and starts serving (503 until Attach and SetServing(true)).
  // InvalidArgument for a bad address, Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(const Options& options,
                                                        ServerMetrics* metrics);
  ~HttpApi();  // Stop()
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // REQUIRES: every pointer of `backend` non-null. Called once.
  void Attach(const ServingBackend& backend);
  void SetServing(bool serving);
  // Closes the listener and waits for every connection's thread. Requests
  // still running keep their slot until they end: call after the scheduler
  // drained. Idempotent.
  void Stop();

  int port() const { return port_; }

 private:
  HttpApi(const Options& options, ServerMetrics* metrics);
  void Route();
  void HandleChat(const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader);
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  // OK, or UNAUTHENTICATED when a key is configured and the request lacks it.
  absl::Status Authenticate(const httplib::Request& req) const;
  // The backend while serving; UNAVAILABLE while loading or shutting down.
  absl::StatusOr<ServingBackend> Backend() const;
  // Reads the body into `body`, at most max_body_bytes; the HTTP status to
  // reply with on failure (413 or 400), else 0.
  int ReadBody(const httplib::Response& res, const httplib::ContentReader& reader,
               std::string* body) const;
  // Replies with the OpenAI error body; counted in metrics unless `count` is
  // false (routing errors that are no request).
  void ReplyError(httplib::Response& res, const absl::Status& status, int http_status,
                  const std::string& request_id, bool count = true);

  const Options options_;
  ServerMetrics* const metrics_;
  const int64_t started_unix_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  int port_ = 0;

  mutable absl::Mutex mu_;
  ServingBackend backend_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_HTTP_API_H_
