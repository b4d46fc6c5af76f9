// ChatCall: one OpenAI chat completion in flight, between the HTTP thread
// that serves its connection and the scheduler threads that run it. The
// scheduler job's callbacks only append to this call's buffer and never
// block, so a slow client never holds the engine; the HTTP thread takes what
// has accumulated (Wait, or NextEvents for a stream).
//
// Thread safety: every method may be called from any thread.
// Ownership: shared (std::shared_ptr) by the HTTP thread and the job; owns the
// parsed request, which the job's images point into.
#ifndef VISMOE_SERVER_CHAT_CALL_H_
#define VISMOE_SERVER_CHAT_CALL_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/serving_backend.h"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::server {

class ChatCall : public std::enable_shared_from_this<ChatCall> {
 public:
  // `metrics` may be null. `up_to_context`: the client named no max tokens
  // (ValidatedRequest::up_to_context).
  ChatCall(ChatCompletionRequest parsed, std::string request_id, CompletionHeader header,
           absl::Duration timeout, bool up_to_context, ServerMetrics* metrics);

  // Validates the request and queues it. On error nothing was queued and the
  // outcome is already counted.
  absl::Status Submit(const ServingBackend& backend);

  // Blocks until the request ended: its final result (the whole text in
  // `text`, the reasoning in `reasoning`) or its error.
  absl::StatusOr<v1::FinalResult> Wait(std::string* text, std::string* reasoning);

  // Streaming: the SSE events accumulated since the last call, waiting up to
  // `wait` for something to send; "" when nothing came. `*finished` is set
  // with the last events ([DONE] included).
  std::string NextEvents(absl::Duration wait, bool* finished);

  // The client went away: the request is cancelled at its next step.
  void ClientGone() { client_gone_.store(true); }

  const std::string& request_id() const { return request_id_; }

 private:
  bool OnDelta(const TokenDelta& delta);
  absl::Status CancelStatus() const;
  void OnDone(absl::StatusOr<GenerateResult> result, double queue_seconds);

  ChatCompletionRequest parsed_;
  const std::string request_id_;
  const CompletionHeader header_;
  const absl::Time received_;
  const absl::Time deadline_;
  const absl::Duration timeout_;
  const bool up_to_context_;
  ServerMetrics* const metrics_;
  std::atomic<bool> client_gone_{false};

  absl::Mutex mu_;
  std::string pending_ ABSL_GUARDED_BY(mu_);            // text not yet taken
  std::string pending_reasoning_ ABSL_GUARDED_BY(mu_);  // reasoning not yet taken
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  v1::FinalResult final_ ABSL_GUARDED_BY(mu_);
  bool role_sent_ = false;  // NextEvents' own (one caller)
};

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_CHAT_CALL_H_
