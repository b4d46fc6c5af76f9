// ServingBackend: the pieces that exist once the model is loaded, shared by
// the two front ends (the gRPC service and the OpenAI-compatible HTTP API),
// and the steps both take with every request: an id, its scheduler job, and
// recording how it ended (metrics and one log line).
//
// Thread safety: the free functions may be called concurrently.
// Ownership: ServingBackend borrows everything; VismoeServer owns it.
#ifndef VISMOE_SERVER_SERVING_BACKEND_H_
#define VISMOE_SERVER_SERVING_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/api/engine.h"
#include "server/image_decoder.h"
#include "server/metrics.h"
#include "server/request_validator.h"
#include "server/scheduler.h"

namespace vismoe::server {

struct ServingBackend {
  Engine* engine = nullptr;
  Scheduler* scheduler = nullptr;
  const RequestValidator* validator = nullptr;
  ImageDecoder* decoder = nullptr;
};

// A new server-wide unique request id ("req-<boot>-<n>").
std::string NewRequestId();

// Printable ASCII only: anything else could forge or corrupt log lines (the
// validator rejects such ids; until then the server's own id is logged).
bool IsLoggableRequestId(absl::string_view id);

// The scheduler job of a validated request: its `prepare` decodes the images
// (timed into `metrics`, which may be null) and prepares the request on the
// engine. The caller sets on_delta, cancel_status and on_done, and keeps
// whatever `validated`'s image views point into alive until on_done.
// REQUIRES: every pointer of `backend` non-null.
std::unique_ptr<SchedulerJob> NewSchedulerJob(const ServingBackend& backend,
                                              ValidatedRequest validated, ServerMetrics* metrics);

// Counts a finished request in vismoe_requests_total{api,status} (and, with a
// result, its latency histograms) and logs one line, the message escaped.
// `metrics` may be null.
void RecordRequestOutcome(ServerMetrics* metrics, ServerMetrics::Api api,
                          const std::string& request_id, const absl::Status& status,
                          const GenerateResult* result);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_SERVING_BACKEND_H_
