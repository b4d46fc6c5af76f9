#include "server/inference_service.h"

#include <chrono>
#include <deque>
#include <optional>
#include <utility>

#include "server/api_key.h"
#include "server/metrics.h"
#include "server/request_bytes.h"
#include "server/status_mapping.h"

namespace vismoe::server {
namespace {

using Clock = std::chrono::steady_clock;

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

absl::string_view ToView(const grpc::string_ref& s) {
  return absl::string_view(s.data(), s.size());
}

// One Generate call. Lives from CreateReactor() until gRPC calls OnDone() and
// no callback is still running on another thread (refs_): gRPC may run OnDone,
// and so the delete, on its own thread as soon as Finish is called, while
// the thread that made Finish possible is still leaving its callback (still
// inside mu_.Unlock(): absl::Mutex may touch its word after another thread
// has acquired it). The scheduler job refers to the reactor only until its
// on_done callback, after which this reactor calls Finish (never before).
// Owns the parsed request, which the validated request's image views borrow.
//
// Reads come first and never overlap the writes: the request message, then
// the half-close (a second message instead is INVALID_ARGUMENT); only then is
// the job submitted, and from then on the stream only writes.
class GenerateReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, const InferenceServiceImpl* service,
                  ServerMetrics* metrics)
      : context_(context),
        service_(service),
        metrics_(metrics),
        received_(Clock::now()),
        request_id_(NewRequestId()) {}

  // Authenticates, then reads the request. Called once, by CreateReactor.
  void Begin() {
    if (absl::Status auth = service_->Authenticate(*context_); !auth.ok()) {
      FinishEarly(auth);
      return;
    }
    StartRead(&read_);
  }

  void OnReadDone(bool ok) override {
    ScopedRef ref(this);
    if (!have_request_) {
      OnRequestRead(ok);
    } else if (ok) {
      FinishEarly(absl::InvalidArgumentError(
          "Generate takes exactly one request message; the client sent a second one"));
    } else {
      OnHalfClose();
    }
  }

 private:
  void OnRequestRead(bool ok) {
    if (!ok) {
      absl::Status cancel = CancelStatus();
      FinishEarly(!cancel.ok() ? cancel
                               : absl::InvalidArgumentError(
                                     "Generate takes one request message; the stream ended "
                                     "without one"));
      return;
    }
    have_request_ = true;
    absl::Status parsed = ParseRequestBytes(read_, &request_);
    read_.Clear();
    if (!parsed.ok()) {
      FinishEarly(parsed);
      return;
    }
    if (IsLoggableRequestId(request_.request_id())) request_id_ = request_.request_id();
    StartRead(&read_);  // the half-close, or a second message
  }

  void OnHalfClose() {
    if (absl::Status cancel = CancelStatus(); !cancel.ok()) {
      FinishEarly(cancel);
      return;
    }
    InferenceServiceImpl::Backend backend;
    if (!service_->GetBackend(&backend)) {
      FinishEarly(absl::UnavailableError("model is loading; retry later"));
      return;
    }
    Start(backend);
  }

  // Either submits the job or finishes the call with an error.
  void Start(const ServingBackend& backend) {
    absl::StatusOr<ValidatedRequest> validated = backend.validator->Validate(request_);
    if (!validated.ok()) {
      FinishEarly(validated.status());
      return;
    }
    validated->request.request_id = request_id_;
    std::unique_ptr<SchedulerJob> job = NewSchedulerJob(backend, std::move(*validated), metrics_);
    job->on_delta = [this](const TokenDelta& d) { return OnDelta(d); };
    job->cancel_status = [this] { return CancelStatus(); };
    job->on_done = [this](absl::StatusOr<GenerateResult> r, double queue_seconds) {
      OnJobDone(std::move(r), queue_seconds);
    };
    absl::Status submitted = backend.scheduler->Submit(std::move(job));
    if (!submitted.ok()) FinishEarly(submitted);
  }

 public:
  void FinishEarly(const absl::Status& status) {
    Record(status, nullptr);
    Finish(ToGrpcStatus(status));
  }

  void OnCancel() override { cancelled_.store(true); }

  void OnWriteDone(bool ok) override {
    ScopedRef ref(this);
    Action action;
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok) broken_ = true;  // the client is gone; stop writing
      action = NextAction();
    }
    Do(action);
  }

  void OnDone() override { Unref(); }

 private:
  struct Action {
    bool write = false;
    bool finish = false;
    grpc::Status status;
  };

  bool OnDelta(const TokenDelta& delta) {
    ScopedRef ref(this);
    Action action;
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return false;
      if (pending_.size() >= InferenceServiceImpl::kMaxPendingDeltas &&
          pending_.back().has_delta()) {
        v1::TokenDelta* last = pending_.back().mutable_delta();
        last->mutable_text()->append(delta.text);
        last->mutable_reasoning()->append(delta.reasoning);
        for (int id : delta.token_ids) last->add_token_ids(id);
      } else {
        v1::GenerateResponse msg;
        msg.mutable_delta()->set_text(delta.text);
        msg.mutable_delta()->set_reasoning(delta.reasoning);
        for (int id : delta.token_ids) msg.mutable_delta()->add_token_ids(id);
        pending_.push_back(std::move(msg));
      }
      action = NextAction();
    }
    Do(action);
    return !cancelled_.load();
  }

  absl::Status CancelStatus() const {
    // The client's deadline fires before ours (ours started when the request
    // arrived), and its cancellation can reach us first: a cancellation this
    // close to the deadline is the deadline.
    constexpr auto kDeadlineSlack = std::chrono::milliseconds(100);
    if (context_->deadline() <= std::chrono::system_clock::now() + kDeadlineSlack) {
      return absl::DeadlineExceededError("request deadline exceeded");
    }
    if (cancelled_.load()) return absl::CancelledError("request cancelled by the client");
    return absl::OkStatus();
  }

  void OnJobDone(absl::StatusOr<GenerateResult> result, double queue_seconds) {
    ScopedRef ref(this);
    const double total = std::chrono::duration<double>(Clock::now() - received_).count();
    Record(result.status(), result.ok() ? &*result : nullptr);
    Action action;
    {
      absl::MutexLock lock(&mu_);
      if (result.ok()) {
        v1::GenerateResponse msg;
        *msg.mutable_final() = ToFinalResult(*result, queue_seconds, total, request_id_);
        pending_.push_back(std::move(msg));
        finish_status_ = grpc::Status::OK;
      } else {
        finish_status_ = ToGrpcStatus(result.status());
      }
      action = NextAction();
    }
    Do(action);  // may call Finish: only `ref` may touch `this` afterwards
  }

  // Keeps the reactor alive until the end of a callback that may end the call.
  class ScopedRef {
   public:
    explicit ScopedRef(GenerateReactor* r) : r_(r) { r_->refs_.fetch_add(1); }
    ~ScopedRef() { r_->Unref(); }
    ScopedRef(const ScopedRef&) = delete;
    ScopedRef& operator=(const ScopedRef&) = delete;

   private:
    GenerateReactor* r_;
  };
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  void Record(const absl::Status& status, const GenerateResult* result) {
    RecordRequestOutcome(metrics_, ServerMetrics::Api::kGrpc, request_id_, status, result);
  }

  // Decides the next gRPC operation; performed by Do() outside the lock.
  Action NextAction() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Action a;
    if (finished_ || write_in_flight_) return a;
    if (broken_) pending_.clear();
    if (!pending_.empty()) {
      in_flight_ = SerializeToByteBuffer(pending_.front());
      pending_.pop_front();
      write_in_flight_ = true;
      a.write = true;
    } else if (finish_status_.has_value()) {
      finished_ = true;
      a.finish = true;
      a.status = *finish_status_;
    }
    return a;
  }

  void Do(const Action& a) {
    if (a.write) StartWrite(&in_flight_);
    if (a.finish) Finish(a.status);
  }

  grpc::CallbackServerContext* const context_;
  const InferenceServiceImpl* const service_;
  v1::GenerateRequest request_;
  grpc::ByteBuffer read_;      // owned by gRPC while a read is in flight
  bool have_request_ = false;  // reads are sequential: no lock needed
  ServerMetrics* const metrics_;
  const Clock::time_point received_;
  std::string request_id_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int> refs_{1};  // gRPC's until OnDone, plus each running ScopedRef

  absl::Mutex mu_;
  std::deque<v1::GenerateResponse> pending_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer in_flight_;  // owned by gRPC while write_in_flight_
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

v1::FinalResult ToFinalResult(const GenerateResult& r, double queue_seconds, double total_seconds,
                              const std::string& request_id) {
  v1::FinalResult f;
  f.set_finish_reason(ToProto(r.finish_reason));
  f.set_request_id(request_id);
  v1::Usage* u = f.mutable_usage();
  u->set_prompt_tokens(r.usage.prompt_tokens);
  u->set_visual_tokens_before(r.usage.visual_tokens_before);
  u->set_visual_tokens_after(r.usage.visual_tokens_after);
  u->set_completion_tokens(r.usage.completion_tokens);
  v1::Timings* t = f.mutable_timings();
  t->set_queue_seconds(queue_seconds);
  t->set_ttft_seconds(r.timings.ttft_seconds);
  t->set_tpot_seconds(r.timings.tpot_seconds);
  t->set_total_seconds(total_seconds);
  v1::OffloadStats* o = f.mutable_offload();
  const OffloadStats& s = r.offload;
  o->set_cache_queries(s.cache_queries);
  o->set_cache_hits(s.cache_hits);
  o->set_hit_ratio(s.cache_queries > 0 ? static_cast<double>(s.cache_hits) / s.cache_queries : 0);
  o->set_prefetch_needed(s.prefetch_needed);
  o->set_prefetch_recalled(s.prefetch_recalled);
  o->set_hot_recall(
      s.prefetch_needed > 0 ? static_cast<double>(s.prefetch_recalled) / s.prefetch_needed : 0);
  o->set_prefetch_issued(s.prefetch_issued);
  o->set_prefetch_used(s.prefetch_used);
  o->set_bytes_h2d(s.bytes_h2d);
  o->set_stall_seconds(s.stall_seconds);
  return f;
}

InferenceServiceImpl::InferenceServiceImpl(const Options& options, ServerMetrics* metrics)
    : options_(options), metrics_(metrics) {}

void InferenceServiceImpl::Attach(const Backend& backend) {
  absl::MutexLock lock(&mu_);
  backend_ = backend;
  attached_ = true;
}

bool InferenceServiceImpl::GetBackend(Backend* backend) const {
  absl::MutexLock lock(&mu_);
  if (!attached_) return false;
  *backend = backend_;
  return true;
}

absl::Status InferenceServiceImpl::Authenticate(const grpc::CallbackServerContext& context) const {
  if (options_.api_key.empty()) return absl::OkStatus();
  const auto& md = context.client_metadata();
  for (auto it = md.find("authorization"); it != md.end() && it->first == "authorization"; ++it) {
    if (ApiKeyMatches(BearerToken(ToView(it->second)), options_.api_key)) {
      return absl::OkStatus();
    }
  }
  for (auto it = md.find("x-api-key"); it != md.end() && it->first == "x-api-key"; ++it) {
    if (ApiKeyMatches(ToView(it->second), options_.api_key)) return absl::OkStatus();
  }
  return absl::UnauthenticatedError(
      "missing or wrong API key: send 'authorization: Bearer <key>' or 'x-api-key: <key>'");
}

grpc::ServerGenericBidiReactor* GenerateService::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  if (ctx->method() != InferenceServiceImpl::kGenerateMethod) {
    return CallbackGenericService::CreateReactor(ctx);  // UNIMPLEMENTED
  }
  auto* reactor = new GenerateReactor(ctx, service_, service_->metrics());
  reactor->Begin();
  return reactor;
}

absl::StatusOr<v1::ModelInfo> InferenceServiceImpl::ModelInfoFor(
    const grpc::CallbackServerContext& context, const grpc::ByteBuffer& request) const {
  if (absl::Status auth = Authenticate(context); !auth.ok()) return auth;
  v1::GetModelInfoRequest parsed;
  if (absl::Status s = ParseRequestBytes(request, &parsed); !s.ok()) return s;
  Backend backend;
  if (!GetBackend(&backend)) return absl::UnavailableError("model is loading; retry later");
  const ModelInfo& info = backend.engine->info();
  v1::ModelInfo response;
  response.set_model_type(info.model_type);
  response.set_model_path(info.model_path);
  response.set_backend(info.backend);
  response.set_num_layers(info.num_layers);
  response.set_num_experts(info.num_experts);
  response.set_experts_per_token(info.experts_per_token);
  response.set_hidden_size(info.hidden_size);
  response.set_vocab_size(info.vocab_size);
  response.set_max_context_tokens(info.max_context_tokens);
  response.set_has_vision(info.has_vision);
  *response.mutable_limits() = options_.limits;
  return response;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::GetModelInfo(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* request,
                                                             grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<v1::ModelInfo> info = ModelInfoFor(*context, *request);
  if (!info.ok()) {
    reactor->Finish(ToGrpcStatus(info.status()));
    return reactor;
  }
  *response = SerializeToByteBuffer(*info);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace vismoe::server
