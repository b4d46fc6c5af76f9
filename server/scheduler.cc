#include "server/scheduler.h"

#include <system_error>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
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
  if (options.preparers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: preparers must be >= 1, got ", options.preparers));
  }
  std::unique_ptr<Scheduler> s(new Scheduler(options, engine, metrics));
  VISMOE_RETURN_IF_ERROR(s->StartThreads());
  return s;
}

Scheduler::Scheduler(const Options& options, Engine* engine, ServerMetrics* metrics)
    : options_(options), engine_(engine), metrics_(metrics) {
  absl::MutexLock lock(&mu_);
  idle_workers_ = options_.workers;
  PublishGauges();
}

absl::Status Scheduler::StartThreads() {
  const int total = options_.preparers + 1 + options_.workers;
  threads_.reserve(total);
  try {
    for (int i = 0; i < options_.preparers; ++i) {
      threads_.emplace_back([this] { PrepareLoop(/*text_lane=*/false); });
    }
    threads_.emplace_back([this] { PrepareLoop(/*text_lane=*/true); });
    for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  } catch (const std::system_error& e) {
    // The system would give no more threads: stop those that started.
    const size_t started = threads_.size();
    Drain(absl::ZeroDuration());
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot start thread ", started + 1, " of ", total,
        " (prepare_threads + 1 + workers): ", e.what(), "; lower --workers or --prepare_threads"));
  }
  return absl::OkStatus();
}

Scheduler::~Scheduler() { Drain(absl::ZeroDuration()); }

absl::Status Scheduler::Submit(std::unique_ptr<SchedulerJob> job) {
  absl::MutexLock lock(&mu_);
  if (draining_) return ShuttingDown();
  const int64_t waiting = static_cast<int64_t>(queue_.size() + ready_.size()) + preparing_;
  // A job may wait if the queue has room, or if an idle worker will take it.
  if (waiting >= options_.max_queue && waiting >= idle_workers_) {
    return absl::ResourceExhaustedError(absl::StrCat("server busy: admission queue full (", waiting,
                                                     " waiting, ", running_,
                                                     " running); retry later"));
  }
  Queued item;
  item.job = std::move(job);
  item.enqueued = absl::Now();
  queue_.push_back(std::move(item));
  PublishGauges();
  return absl::OkStatus();
}

bool Scheduler::Idle() const {
  return queue_.empty() && ready_.empty() && preparing_ == 0 && running_ == 0;
}

std::deque<Scheduler::Queued>::iterator Scheduler::NextToPrepare(bool text_lane) {
  // Only as far ahead of the workers as there are workers (plus the jobs
  // being prepared): prepared requests hold their pixels.
  if (static_cast<int64_t>(ready_.size()) >= options_.workers) return queue_.end();
  if (!text_lane) return queue_.begin();
  return absl::c_find_if(queue_, [](const Queued& q) { return q.job->text_only; });
}

bool Scheduler::PreparerMayGo() { return stop_ || NextToPrepare(false) != queue_.end(); }
bool Scheduler::TextLaneMayGo() { return stop_ || NextToPrepare(true) != queue_.end(); }

void Scheduler::PrepareLoop(bool text_lane) {
  while (true) {
    Queued item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(text_lane ? absl::Condition(this, &Scheduler::TextLaneMayGo)
                          : absl::Condition(this, &Scheduler::PreparerMayGo));
      // stop_ is set with queue_ empty (drained or dropped), and Submit refuses from then on.
      const auto next = NextToPrepare(text_lane);
      if (next == queue_.end()) return;
      item = std::move(*next);
      queue_.erase(next);
      ++preparing_;
      PublishGauges();
    }
    item.queue_seconds = absl::ToDoubleSeconds(absl::Now() - item.enqueued);
    const bool prepared = Prepare(item);
    bool shut_down = false;
    {
      absl::MutexLock lock(&mu_);
      --preparing_;
      if (prepared && aborted_) {
        shut_down = true;
      } else if (prepared) {
        item.enqueued = absl::Now();
        ready_.push_back(std::move(item));
      }
      PublishGauges();
    }
    if (shut_down) item.job->on_done(ShuttingDown(), item.queue_seconds);
  }
}

bool Scheduler::Prepare(Queued& item) {
  SchedulerJob& job = *item.job;
  absl::Status cancelled = CancelStatus(job);
  if (!cancelled.ok()) {
    job.on_done(cancelled, item.queue_seconds);
    return false;
  }
  absl::StatusOr<std::unique_ptr<PreparedRequest>> request =
      job.prepare([this, &job] { return CancelStatus(job); });
  if (!request.ok()) {
    job.on_done(request.status(), item.queue_seconds);
    return false;
  }
  item.prepared = *std::move(request);
  return true;
}

void Scheduler::WorkerLoop() {
  while (true) {
    Queued item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Scheduler* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stop_ || !s->ready_.empty(); },
          this));
      if (ready_.empty()) return;  // stop_ and nothing left
      item = std::move(ready_.front());
      ready_.pop_front();
      --idle_workers_;
      ++running_;
      PublishGauges();
    }
    item.queue_seconds += absl::ToDoubleSeconds(absl::Now() - item.enqueued);
    RunJob(item);
    item = Queued();  // the job and its prepared request go before the worker counts as idle
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

absl::Status Scheduler::CancelStatus(const SchedulerJob& job) const {
  if (Aborted()) return ShuttingDown();
  return job.cancel_status ? job.cancel_status() : absl::OkStatus();
}

void Scheduler::RunJob(Queued& item) {
  SchedulerJob& job = *item.job;
  absl::Status cancelled = CancelStatus(job);
  if (!cancelled.ok()) {
    job.on_done(cancelled, item.queue_seconds);
    return;
  }
  GenerateCallbacks callbacks;
  callbacks.on_delta = job.on_delta;
  callbacks.is_cancelled = [&] { return !CancelStatus(job).ok(); };
  absl::StatusOr<GenerateResult> result = engine_->Generate(*item.prepared, callbacks);
  // A request cut short by the caller or by shutdown reports why, not a
  // truncated success.
  if (result.ok() && result->finish_reason == FinishReason::kCancelled) {
    cancelled = CancelStatus(job);
    if (!cancelled.ok()) {
      job.on_done(cancelled, item.queue_seconds);
      return;
    }
  }
  job.on_done(std::move(result), item.queue_seconds);
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
    mu_.AwaitWithDeadline(
        absl::Condition(
            +[](Scheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->Idle(); }, this),
        deadline);
    if (!Idle()) {
      spdlog::warn(
          "drain timeout ({}) reached: cancelling {} running, {} being prepared and {} waiting "
          "requests",
          absl::FormatDuration(timeout), running_, preparing_, queue_.size() + ready_.size());
      aborted_ = true;  // running and preparing jobs see it and end with UNAVAILABLE
      dropped.swap(queue_);
      for (Queued& q : ready_) dropped.push_back(std::move(q));
      ready_.clear();
    }
    stop_ = true;
    PublishGauges();
  }
  const absl::Time now = absl::Now();
  for (Queued& q : dropped) {
    q.job->on_done(ShuttingDown(), q.queue_seconds + absl::ToDoubleSeconds(now - q.enqueued));
  }
  dropped.clear();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  absl::MutexLock lock(&mu_);
  drained_ = true;
}

void Scheduler::StopAccepting() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

int64_t Scheduler::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size() + ready_.size()) + preparing_;
}

int64_t Scheduler::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

void Scheduler::PublishGauges() {
  if (metrics_ == nullptr) return;
  metrics_->SetQueueDepth(static_cast<int64_t>(queue_.size() + ready_.size()) + preparing_);
  metrics_->SetRunningRequests(running_);
}

}  // namespace vismoe::server
