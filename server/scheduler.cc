#include "server/scheduler.h"

#include "absl/strings/str_cat.h"
#include "server/metrics.h"
#include "spdlog/spdlog.h"

namespace vismoe::server {
namespace {

absl::Status ShuttingDown() { return absl::UnavailableError("server shutting down"); }

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const Options& options, Engine* engine,
                                                             ServerMetrics* metrics) {
  if (engine == nullptr) return absl::InvalidArgumentError("scheduler: engine is null");
  if (options.max_queue < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: max_queue must be >= 0, got ", options.max_queue));
  }
  if (options.workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: workers must be >= 1, got ", options.workers));
  }
  return std::unique_ptr<Scheduler>(new Scheduler(options, engine, metrics));
}

Scheduler::Scheduler(const Options& options, Engine* engine, ServerMetrics* metrics)
    : options_(options), engine_(engine), metrics_(metrics) {
  {
    absl::MutexLock lock(&mu_);
    idle_workers_ = options_.workers;
    PublishGauges();
  }
  workers_.reserve(options_.workers);
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

Scheduler::~Scheduler() { Drain(absl::ZeroDuration()); }

absl::Status Scheduler::Submit(std::unique_ptr<SchedulerJob> job) {
  absl::MutexLock lock(&mu_);
  if (draining_) return ShuttingDown();
  const int64_t waiting = static_cast<int64_t>(queue_.size());
  // A job may wait if the queue has room, or if an idle worker will take it.
  if (waiting >= options_.max_queue && waiting >= idle_workers_) {
    return absl::ResourceExhaustedError(absl::StrCat("server busy: admission queue full (", waiting,
                                                     " waiting, ", running_,
                                                     " running); retry later"));
  }
  queue_.push_back(Queued{std::move(job), absl::Now()});
  PublishGauges();
  return absl::OkStatus();
}

void Scheduler::WorkerLoop() {
  while (true) {
    Queued item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Scheduler* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stop_ || !s->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stop_ and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
      --idle_workers_;
      ++running_;
      PublishGauges();
    }
    RunJob(*item.job, item.enqueued);
    item.job.reset();
    absl::MutexLock lock(&mu_);
    ++idle_workers_;
    --running_;
    PublishGauges();
  }
}

bool Scheduler::Aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

void Scheduler::RunJob(SchedulerJob& job, absl::Time enqueued) {
  const double queue_seconds = absl::ToDoubleSeconds(absl::Now() - enqueued);
  auto cancel_status = [&]() -> absl::Status {
    if (Aborted()) return ShuttingDown();
    return job.cancel_status ? job.cancel_status() : absl::OkStatus();
  };
  absl::Status cancelled = cancel_status();
  if (!cancelled.ok()) {
    job.on_done(cancelled, queue_seconds);
    return;
  }
  absl::StatusOr<std::unique_ptr<PreparedRequest>> request = job.prepare();
  if (!request.ok()) {
    job.on_done(request.status(), queue_seconds);
    return;
  }
  cancelled = cancel_status();
  if (!cancelled.ok()) {
    job.on_done(cancelled, queue_seconds);
    return;
  }
  GenerateCallbacks callbacks;
  callbacks.on_delta = job.on_delta;
  callbacks.is_cancelled = [&] { return !cancel_status().ok(); };
  absl::StatusOr<GenerateResult> result = engine_->Generate(**request, callbacks);
  // A request cut short by the caller or by shutdown reports why, not a
  // truncated success.
  if (result.ok() && result->finish_reason == FinishReason::kCancelled) {
    cancelled = cancel_status();
    if (!cancelled.ok()) {
      job.on_done(cancelled, queue_seconds);
      return;
    }
  }
  job.on_done(std::move(result), queue_seconds);
}

void Scheduler::Drain(absl::Duration timeout) {
  std::deque<Queued> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (drain_started_) {
      // Another Drain() is (or was) in charge; wait for it to finish.
      mu_.Await(absl::Condition(&drained_));
      return;
    }
    drain_started_ = true;
    draining_ = true;
    const absl::Time deadline = absl::Now() + timeout;
    auto idle = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
    auto done = +[](Scheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
      return s->queue_.empty() && s->running_ == 0;
    };
    mu_.AwaitWithDeadline(absl::Condition(done, this), deadline);
    if (!idle()) {
      spdlog::warn("drain timeout ({}) reached: cancelling {} running and {} queued requests",
                   absl::FormatDuration(timeout), running_, queue_.size());
      aborted_ = true;
      dropped.swap(queue_);
    }
    stop_ = true;
    PublishGauges();
  }
  for (Queued& q : dropped) {
    q.job->on_done(ShuttingDown(), absl::ToDoubleSeconds(absl::Now() - q.enqueued));
  }
  dropped.clear();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  absl::MutexLock lock(&mu_);
  drained_ = true;
}

void Scheduler::StopAccepting() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

int64_t Scheduler::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t Scheduler::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

void Scheduler::PublishGauges() {
  if (metrics_ == nullptr) return;
  metrics_->SetQueueDepth(static_cast<int64_t>(queue_.size()));
  metrics_->SetRunningRequests(running_);
}

}  // namespace vismoe::server
