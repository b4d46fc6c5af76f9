// BatchLoop: the engine's step thread. Generate calls hand it a Sequence
// (Submit) and wait for the sequence's `done`; the thread runs
//   step() = schedule; run; postprocess
// while any sequence is queued or running, and sleeps otherwise. Between
// steps it drops the sequences whose callers cancelled (is_cancelled), so a
// cancellation or deadline ends one sequence without disturbing the others,
// and it reports the scheduler's preemptions and ends the sequences the KV
// pool cannot hold with their error.
//
// Thread safety: Submit may be called from any thread. The callbacks of
// every sequence (deltas, is_cancelled, observers) run on the step thread.
// Ownership: borrows the scheduler, runner and stats sink (must outlive it)
// and the submitted sequences until it notifies their `done`.
#ifndef VISMOE_ENGINE_RUNTIME_BATCH_LOOP_H_
#define VISMOE_ENGINE_RUNTIME_BATCH_LOOP_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend/kv_pool.h"
#include "engine/core/stats_sink.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/step_scheduler.h"

namespace vismoe {

class BatchLoop {
 public:
  // `on_busy` runs on the step thread before the first step after an idle
  // spell (the engine resets its expert predictor's per-request state there,
  // so sequences that run alone behave as they always did).
  BatchLoop(StepScheduler* scheduler, ModelRunner* runner, const KvPool* pool, StatsSink* stats,
            std::function<void()> on_busy);
  // Stops the thread; sequences still queued or running end Unavailable.
  ~BatchLoop();
  BatchLoop(const BatchLoop&) = delete;
  BatchLoop& operator=(const BatchLoop&) = delete;

  // Queues `seq`; its `done` is notified when it has finished (result or status).
  void Submit(Sequence* seq);

 private:
  void Loop();
  // Moves submitted sequences into the scheduler; false when stopping.
  bool TakeIncoming(bool wait);
  void Step();
  // After a step: the sequence's next token, or its end.
  void Postprocess(const ScheduledChunk& chunk, const absl::Status& status);
  // Takes the sequence out, frees its cache and notifies its caller.
  void Finish(Sequence* seq, absl::Status status);
  void PublishGauges();
  // A finished sequence's skipped experts, to the stats sink.
  void ReportSkipping(const ExpertSkipCounts& counts);
  // A finished sequence's committed experts (commit miss policy), likewise.
  void ReportCommit(const CommitCounts& counts);
  // A finished sequence's speculative executions, likewise.
  void ReportSpeculation(const SpeculativeCounts& counts);

  StepScheduler* const scheduler_;
  ModelRunner* const runner_;
  const KvPool* const pool_;
  StatsSink* const stats_;  // may be null
  const std::function<void()> on_busy_;
  absl::Mutex mu_;
  std::vector<Sequence*> incoming_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after everything above
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_BATCH_LOOP_H_
