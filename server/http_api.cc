#include "server/http_api.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/api_key.h"
#include "server/chat_call.h"
#include "server/listen_address.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_bytes.h"
#include "server/status_mapping.h"
#include "spdlog/spdlog.h"

namespace vismoe::server {
namespace {

constexpr char kJson[] = "application/json";

time_t Seconds(absl::Duration d) { return static_cast<time_t>(absl::ToInt64Seconds(d)); }

// Debian's httplib listens with a backlog of 5: eight clients connecting at
// once overflow it and the kernel drops SYNs, which the clients resend only
// after a second. Start() raises it on the bound socket (listen() again).
constexpr int kListenBacklog = 1024;

// "host:port" (IPv6 host in brackets) as httplib's host and port.
std::pair<std::string, int> SplitHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host = address.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  int port = 0;
  (void)absl::SimpleAtoi(address.substr(colon + 1), &port);  // checked by CheckHostPort
  return {std::string(host), port};
}

}  // namespace

HttpApi::HttpApi(const Options& options, ServerMetrics* metrics)
    : options_(options),
      metrics_(metrics),
      started_unix_(absl::ToUnixSeconds(absl::Now())),
      http_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(const Options& options,
                                                        ServerMetrics* metrics) {
  if (absl::Status s = CheckHostPort("http_listen", options.listen); !s.ok()) return s;
  // A client that disconnects mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<HttpApi> api(new HttpApi(options, metrics));
  httplib::Server& http = *api->http_;
  const size_t threads = static_cast<size_t>(options.threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR (a restarted daemon rebinds at once) but not httplib's
  // default SO_REUSEPORT: two daemons must not share a port silently. The
  // last socket seen is the one bound.
  auto listen_fd = std::make_shared<std::atomic<int>>(-1);
  http.set_socket_options([listen_fd](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd->store(sock);
  });
  http.set_tcp_nodelay(true);  // each SSE chunk leaves at once
  http.set_read_timeout(Seconds(kIoTimeout));
  http.set_write_timeout(Seconds(kIoTimeout));
  http.set_keep_alive_timeout(Seconds(kKeepAliveTimeout));
  http.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  api->Route();
  const auto [host, port] = SplitHostPort(options.listen);
  api->port_ =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (api->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options.listen,
                                               " (address in use or invalid?)"));
  }
  if (::listen(listen_fd->load(), kListenBacklog) != 0) {
    spdlog::warn("HTTP API: cannot raise the listen backlog to {}", kListenBacklog);
  }
  api->listener_ = std::thread([&http] { http.listen_after_bind(); });
  spdlog::info("OpenAI-compatible HTTP API on {} (port {}), model id \"{}\"", options.listen,
               api->port_, options.model_name);
  return api;
}

HttpApi::~HttpApi() { Stop(); }

void HttpApi::Attach(const ServingBackend& backend) {
  absl::MutexLock lock(&mu_);
  backend_ = backend;
  attached_ = true;
}

void HttpApi::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  serving_ = serving;
}

void HttpApi::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    serving_ = false;
  }
  http_->stop();
  if (listener_.joinable()) listener_.join();
}

absl::StatusOr<ServingBackend> HttpApi::Backend() const {
  absl::MutexLock lock(&mu_);
  if (!attached_) return absl::UnavailableError("model is loading; retry later");
  if (!serving_) return absl::UnavailableError("server shutting down");
  return backend_;
}

absl::Status HttpApi::Authenticate(const httplib::Request& req) const {
  if (options_.api_key.empty()) return absl::OkStatus();
  if (ApiKeyMatches(BearerToken(req.get_header_value("Authorization")), options_.api_key) ||
      ApiKeyMatches(req.get_header_value("X-Api-Key"), options_.api_key)) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError("missing or wrong API key: send 'Authorization: Bearer <key>'");
}

void HttpApi::ReplyError(httplib::Response& res, const absl::Status& status, int http_status,
                         const std::string& request_id, bool count) {
  if (count) {
    RecordRequestOutcome(metrics_, ServerMetrics::Api::kHttp, request_id, status, nullptr);
  }
  res.status = http_status;
  if (http_status == 429 || http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(status, http_status), kJson);
}

void HttpApi::Route() {
  httplib::Server& http = *http_;
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader) { HandleChat(req, res, reader); });
  http.Get("/v1/models",
           [this](const httplib::Request& req, httplib::Response& res) { HandleModels(req, res); });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const absl::StatusOr<ServingBackend> backend = Backend();
    res.status = backend.ok() ? 200 : 503;
    res.set_content(backend.ok() ? R"({"status":"ok"})" : ErrorJson(backend.status(), 503), kJson);
  });
  // Routing and transport errors httplib answers itself (404, 405, 413 from
  // Content-Length or "Expect: 100-continue", 400 unparsable) get the same
  // JSON error body.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                 httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    absl::Status status;
    switch (res.status) {
      case 404:
        status = absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path));
        break;
      case 413:
        status = absl::ResourceExhaustedError("request body over the server's --max_message_bytes");
        break;
      default:
        status = absl::InvalidArgumentError(absl::StrCat("HTTP error ", res.status));
    }
    res.set_content(ErrorJson(status, res.status), kJson);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("HTTP handler failed: {}", EscapeForLog(what));
        res.status = 500;
        res.set_content(ErrorJson(absl::InternalError("internal server error"), 500), kJson);
      });
  // Refuse an announced oversized body before the client sends it.
  const uint64_t max_body = static_cast<uint64_t>(options_.max_body_bytes);
  http.set_expect_100_continue_handler([max_body](const httplib::Request& req, httplib::Response&) {
    uint64_t length = 0;
    const std::string value = req.get_header_value("Content-Length");
    return absl::SimpleAtoi(value, &length) && length > max_body ? 413 : 100;
  });
}

int HttpApi::ReadBody(const httplib::Response& res, const httplib::ContentReader& reader,
                      std::string* body) const {
  const size_t max = static_cast<size_t>(options_.max_body_bytes);
  bool too_big = false;
  const bool ok = reader([&](const char* data, size_t n) {
    // Also bounds chunked and compressed bodies, which carry no length.
    if (body->size() + n > max) {
      too_big = true;
      return false;
    }
    body->append(data, n);
    return true;
  });
  if (ok) return 0;
  return too_big || res.status == 413 ? 413 : 400;
}

void HttpApi::HandleChat(const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader) {
  std::string request_id = NewRequestId();
  if (absl::Status auth = Authenticate(req); !auth.ok()) {
    ReplyError(res, auth, 401, request_id);
    return;
  }
  std::string body;
  if (const int http_status = ReadBody(res, reader, &body); http_status != 0) {
    const absl::Status status = http_status == 413
                                    ? absl::ResourceExhaustedError(absl::StrCat(
                                          "request body over the server's --max_message_bytes (",
                                          options_.max_body_bytes, " bytes)"))
                                    : absl::InvalidArgumentError("could not read the request body");
    ReplyError(res, status, http_status, request_id);
    return;
  }
  absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(body);
  body.clear();
  body.shrink_to_fit();
  if (!parsed.ok()) {
    ReplyError(res, parsed.status(), 400, request_id);
    return;
  }
  if (!parsed->model.empty() && parsed->model != options_.model_name) {
    ReplyError(res,
               absl::NotFoundError(absl::StrCat("model '", parsed->model.substr(0, 64),
                                                "' not found; this server serves '",
                                                options_.model_name, "'")),
               404, request_id);
    return;
  }
  if (IsLoggableRequestId(parsed->request.request_id())) {
    request_id = parsed->request.request_id();
  }
  const bool up_to_context = parsed->request.sampling().max_new_tokens() == 0;
  if (up_to_context) {
    parsed->request.mutable_sampling()->set_max_new_tokens(options_.default_max_tokens);
  }
  absl::StatusOr<ServingBackend> backend = Backend();
  if (!backend.ok()) {
    ReplyError(res, backend.status(), 503, request_id);
    return;
  }
  const bool stream = parsed->stream;
  CompletionHeader header{absl::StrCat("chatcmpl-", request_id), absl::ToUnixSeconds(absl::Now()),
                          options_.model_name};
  auto call = std::make_shared<ChatCall>(std::move(*parsed), request_id, header,
                                         options_.request_timeout, up_to_context, metrics_);
  if (absl::Status s = call->Submit(*backend); !s.ok()) {
    ReplyError(res, s, ToHttpStatus(s.code()), request_id, /*count=*/false);
    return;
  }
  if (!stream) {
    std::string text, reasoning;
    absl::StatusOr<v1::FinalResult> final = call->Wait(&text, &reasoning);
    if (!final.ok()) {
      ReplyError(res, final.status(), ToHttpStatus(final.status().code()), request_id, false);
      return;
    }
    res.set_content(ChatCompletionJson(header, text, *final, reasoning), kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies must not hold the events back
  res.set_chunked_content_provider(
      "text/event-stream",
      [call](size_t, httplib::DataSink& sink) {
        bool finished = false;
        const std::string events = call->NextEvents(kPollInterval, &finished);
        // Between tokens, a peek at the socket notices a client that left.
        const bool ok =
            events.empty() ? sink.is_writable() : sink.write(events.data(), events.size());
        if (!ok) {
          call->ClientGone();
          return false;
        }
        if (finished) sink.done();
        return true;
      },
      [call](bool success) {
        if (!success) call->ClientGone();
      });
}

void HttpApi::HandleModels(const httplib::Request& req, httplib::Response& res) {
  if (absl::Status auth = Authenticate(req); !auth.ok()) {
    ReplyError(res, auth, 401, "", /*count=*/false);
    return;
  }
  const absl::StatusOr<ServingBackend> backend = Backend();
  if (!backend.ok()) {
    ReplyError(res, backend.status(), 503, "", /*count=*/false);
    return;
  }
  res.set_content(
      ModelListJson(options_.model_name, started_unix_, backend->engine->info().max_context_tokens),
      kJson);
}

}  // namespace vismoe::server
