// Scheduler: admission control in front of the engine. A bounded queue of
// jobs feeds two stages of threads; gRPC threads only submit.
//
//   Submit()   never blocks: a full queue is RESOURCE_EXHAUSTED at once, a
//              draining scheduler UNAVAILABLE "server shutting down".
//   preparers  per job: prepare() (image decoding, Engine::Prepare: template,
//              tokenizer, image preprocessing, checks), so this host work
//              never holds up the engine. A preparer takes a job only while
//              fewer than `workers` prepared jobs wait for the engine (their
//              pixels are memory). One more preparer, the text lane, takes
//              only jobs without images, so requests whose images take long
//              to decode never hold up a text-only request.
//   workers    per prepared job: Engine::Generate with cancellation polled
//              between decode steps, then on_done().
//   Drain()    stops accepting, lets waiting and running jobs finish until
//              the timeout, then cancels the rest with UNAVAILABLE.
// A job counts as waiting (queue_depth) from Submit until a worker starts it.
//
// Thread safety: all methods may be called from any thread.
// Ownership: borrows the Engine and the (optional) ServerMetrics, which must
// outlive it; owns its worker threads and the queued jobs.
#ifndef VISMOE_SERVER_SCHEDULER_H_
#define VISMOE_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/api/engine.h"
#include "engine/api/request.h"

namespace vismoe {
class ServerMetrics;
}  // namespace vismoe

namespace vismoe::server {

// One request as the scheduler sees it. Callbacks run on a worker thread.
struct SchedulerJob {
  // Builds the engine's prepared request (decodes images, Engine::Prepare,
  // checks the prompt length). `cancel_status` is the scheduler's view of
  // cancel_status (shutdown included): prepare stops at its next check (each
  // image, and before Engine::Prepare) and returns it.
  std::function<absl::StatusOr<std::unique_ptr<PreparedRequest>>(
      const std::function<absl::Status()>& cancel_status)>
      prepare;
  // Each streamed piece of output; return false to cancel.
  std::function<bool(const TokenDelta&)> on_delta;
  // OK while the caller still wants the result; else why not (Cancelled,
  // DeadlineExceeded). Polled between decode steps. May be null.
  std::function<absl::Status()> cancel_status;
  // Called exactly once, last: the result or the error, and the time the job
  // waited in the queue.
  std::function<void(absl::StatusOr<GenerateResult>, double queue_seconds)> on_done;
  // No images to decode: the text lane may prepare it.
  bool text_only = false;
};

class Scheduler {
 public:
  struct Options {
    int max_queue = 64;  // jobs waiting for a worker
    int workers = 1;     // jobs running on the engine at once
    int preparers = 2;   // jobs being prepared at once (plus the text lane)
  };

  // REQUIRES: engine != nullptr; both pointers outlive the scheduler.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const Options& options, Engine* engine,
                                                           ServerMetrics* metrics);
  ~Scheduler();  // Drain(ZeroDuration()) if not drained yet.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues the job, or returns RESOURCE_EXHAUSTED / UNAVAILABLE without
  // calling any of its callbacks.
  absl::Status Submit(std::unique_ptr<SchedulerJob> job);

  // From now on Submit() returns UNAVAILABLE; queued and running jobs go on.
  void StopAccepting();

  // Graceful shutdown; returns when every worker has exited. Idempotent.
  void Drain(absl::Duration timeout);

  int64_t queue_depth() const;
  int64_t running() const;

 private:
  // Starts the preparer and worker threads; ResourceExhausted (the started
  // ones stopped) when the system gives no more.
  absl::Status StartThreads();
  Scheduler(const Options& options, Engine* engine, ServerMetrics* metrics);
  struct Queued {
    std::unique_ptr<SchedulerJob> job;
    absl::Time enqueued;       // when it last started waiting
    double queue_seconds = 0;  // waited before preparation
    std::unique_ptr<PreparedRequest> prepared;
  };

  // text_lane: take only text-only jobs.
  void PrepareLoop(bool text_lane);
  void WorkerLoop();
  // Runs job.prepare(); returns false when the job is finished (on_done called).
  bool Prepare(Queued& item);
  void RunJob(Queued& item);
  // The caller's or the drain's reason to stop the job, or OK.
  absl::Status CancelStatus(const SchedulerJob& job) const;
  bool Aborted() const;
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job a preparer of this lane takes next, or queue_.end().
  std::deque<Queued>::iterator NextToPrepare(bool text_lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PreparerMayGo() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool TextLaneMayGo() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  Engine* const engine_;
  ServerMetrics* const metrics_;

  mutable absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);  // submitted, not yet being prepared
  std::deque<Queued> ready_ ABSL_GUARDED_BY(mu_);  // prepared, waiting for a worker
  int64_t preparing_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t idle_workers_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;  // no new jobs
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;   // cancel everything left
  bool stop_ ABSL_GUARDED_BY(mu_) = false;      // threads exit when idle
  bool drain_started_ ABSL_GUARDED_BY(mu_) = false;
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // preparers, the text lane and workers
};

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_SCHEDULER_H_
