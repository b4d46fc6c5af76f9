#include "server/serving_backend.h"

#include <atomic>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "server/request_bytes.h"
#include "server/status_mapping.h"
#include "spdlog/spdlog.h"

namespace vismoe::server {

std::string NewRequestId() {
  static const uint32_t kBoot = std::random_device{}();
  static std::atomic<uint64_t> next{1};
  return absl::StrFormat("req-%08x-%d", kBoot, next.fetch_add(1));
}

bool IsLoggableRequestId(absl::string_view id) {
  if (id.empty()) return false;
  for (const char c : id) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

std::unique_ptr<SchedulerJob> NewSchedulerJob(const ServingBackend& backend,
                                              ValidatedRequest validated, ServerMetrics* metrics) {
  auto job = std::make_unique<SchedulerJob>();
  job->text_only = validated.image_data.empty();
  auto shared = std::make_shared<ValidatedRequest>(std::move(validated));
  job->prepare = [backend, shared, metrics](const std::function<absl::Status()>& cancel_status)
      -> absl::StatusOr<std::unique_ptr<PreparedRequest>> {
    double decode_seconds = 0;
    const bool has_images = !shared->image_data.empty();
    absl::StatusOr<std::unique_ptr<PreparedRequest>> r = backend.validator->Complete(
        std::move(*shared), *backend.decoder, *backend.engine, &decode_seconds, cancel_status);
    if (metrics != nullptr && has_images) metrics->ObserveImageDecode(decode_seconds);
    return r;
  };
  return job;
}

void RecordRequestOutcome(ServerMetrics* metrics, ServerMetrics::Api api,
                          const std::string& request_id, const absl::Status& status,
                          const GenerateResult* result) {
  const std::string label = StatusLabel(ToGrpcStatus(status).error_code());
  if (metrics != nullptr) {
    metrics->OnRequestFinished(api, label);
    if (result != nullptr) metrics->ObserveResult(api, *result);
  }
  const char* api_name = ServerMetrics::ApiLabel(api);
  if (status.ok() && result != nullptr) {
    spdlog::info("request {} ({}) ok: {} prompt + {} completion tokens, finish={}, {:.3f}s",
                 request_id, api_name, result->usage.prompt_tokens, result->usage.completion_tokens,
                 FinishReasonName(result->finish_reason), result->timings.total_seconds);
  } else {
    spdlog::info("request {} ({}) {}: {}", request_id, api_name, label,
                 EscapeForLog(status.message()));
  }
}

}  // namespace vismoe::server
