#include "server/chat_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/inference_service.h"  // ToFinalResult

namespace vismoe::server {

ChatCall::ChatCall(ChatCompletionRequest parsed, std::string request_id, CompletionHeader header,
                   absl::Duration timeout, bool up_to_context, ServerMetrics* metrics)
    : parsed_(std::move(parsed)),
      request_id_(std::move(request_id)),
      header_(std::move(header)),
      received_(absl::Now()),
      deadline_(received_ + timeout),
      timeout_(timeout),
      up_to_context_(up_to_context),
      metrics_(metrics) {}

absl::Status ChatCall::Submit(const ServingBackend& backend) {
  absl::StatusOr<ValidatedRequest> validated = backend.validator->Validate(parsed_.request);
  absl::Status status = validated.status();
  if (validated.ok()) {
    validated->request.request_id = request_id_;
    validated->up_to_context = up_to_context_;
    std::unique_ptr<SchedulerJob> job = NewSchedulerJob(backend, std::move(*validated), metrics_);
    // The job holds the call alive until on_done (its images point into it).
    std::shared_ptr<ChatCall> self = shared_from_this();
    job->on_delta = [self](const TokenDelta& d) { return self->OnDelta(d); };
    job->cancel_status = [self] { return self->CancelStatus(); };
    job->on_done = [self](absl::StatusOr<GenerateResult> r, double queue_seconds) {
      self->OnDone(std::move(r), queue_seconds);
    };
    status = backend.scheduler->Submit(std::move(job));
  }
  if (!status.ok()) {
    RecordRequestOutcome(metrics_, ServerMetrics::Api::kHttp, request_id_, status, nullptr);
  }
  return status;
}

bool ChatCall::OnDelta(const TokenDelta& delta) {
  {
    absl::MutexLock lock(&mu_);
    pending_ += delta.text;
    pending_reasoning_ += delta.reasoning;
  }
  return !client_gone_.load();
}

absl::Status ChatCall::CancelStatus() const {
  if (client_gone_.load()) return absl::CancelledError("the HTTP client disconnected");
  if (absl::Now() >= deadline_) {
    return absl::DeadlineExceededError(
        absl::StrCat("request ran past the server's --http_request_timeout (",
                     absl::FormatDuration(timeout_), ")"));
  }
  return absl::OkStatus();
}

void ChatCall::OnDone(absl::StatusOr<GenerateResult> result, double queue_seconds) {
  RecordRequestOutcome(metrics_, ServerMetrics::Api::kHttp, request_id_, result.status(),
                       result.ok() ? &*result : nullptr);
  absl::MutexLock lock(&mu_);
  done_ = true;
  status_ = result.status();
  if (result.ok()) {
    const double total = absl::ToDoubleSeconds(absl::Now() - received_);
    final_ = ToFinalResult(*result, queue_seconds, total, request_id_);
  }
}

absl::StatusOr<v1::FinalResult> ChatCall::Wait(std::string* text, std::string* reasoning) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  if (!status_.ok()) return status_;
  *text = std::move(pending_);
  *reasoning = std::move(pending_reasoning_);
  return final_;
}

std::string ChatCall::NextEvents(absl::Duration wait, bool* finished) {
  std::string out;
  if (!role_sent_) {
    // OpenAI's first chunk names the role; sent at once, before any token.
    out = ChunkEvent(header_, "", /*first=*/true, nullptr, parsed_.include_usage);
    role_sent_ = true;
  }
  absl::MutexLock lock(&mu_);
  const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ || !pending_.empty() || !pending_reasoning_.empty();
  };
  if (out.empty()) mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
  if (!pending_.empty() || !pending_reasoning_.empty()) {
    absl::StrAppend(&out, ChunkEvent(header_, pending_, false, nullptr, parsed_.include_usage,
                                     pending_reasoning_));
    pending_.clear();
    pending_reasoning_.clear();
  }
  *finished = done_;
  if (!done_) return out;
  if (!status_.ok()) {
    absl::StrAppend(&out, ErrorEvent(status_));
    return out;
  }
  absl::StrAppend(&out, ChunkEvent(header_, "", false, &final_, parsed_.include_usage));
  if (parsed_.include_usage) absl::StrAppend(&out, UsageEvent(header_, final_));
  absl::StrAppend(&out, kDoneEvent);
  return out;
}

}  // namespace vismoe::server
