#include "engine/runtime/batch_loop.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/argmax.h"
#include "spdlog/spdlog.h"

namespace vismoe {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Total time, and TTFT / TPOT once a token (or the end of sequence) came.
void FillTimings(Clock::time_point start, Clock::time_point first_token, GenerateResult* result) {
  const Clock::time_point end = Clock::now();
  result->usage.completion_tokens = static_cast<int>(result->token_ids.size());
  result->timings.total_seconds = Seconds(start, end);
  if (result->token_ids.empty() && result->finish_reason != FinishReason::kEos) return;
  if (first_token == Clock::time_point()) first_token = end;
  result->timings.ttft_seconds = Seconds(start, first_token);
  if (result->token_ids.size() > 1) {
    result->timings.tpot_seconds =
        Seconds(first_token, end) / static_cast<double>(result->token_ids.size() - 1);
  }
}

bool CallerCancelled(const Sequence& seq) {
  return seq.callbacks.is_cancelled && seq.callbacks.is_cancelled();
}

}  // namespace

BatchLoop::BatchLoop(StepScheduler* scheduler, ModelRunner* runner, const KvPool* pool,
                     StatsSink* stats, std::function<void()> on_busy)
    : scheduler_(scheduler),
      runner_(runner),
      pool_(pool),
      stats_(stats),
      on_busy_(std::move(on_busy)),
      thread_([this] { Loop(); }) {}

BatchLoop::~BatchLoop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void BatchLoop::Submit(Sequence* seq) {
  absl::MutexLock lock(&mu_);
  incoming_.push_back(seq);
}

bool BatchLoop::TakeIncoming(bool wait) {
  std::vector<Sequence*> taken;
  bool stop = false;
  {
    absl::MutexLock lock(&mu_);
    if (wait) {
      mu_.Await(absl::Condition(
          +[](BatchLoop* l)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) { return l->stop_ || !l->incoming_.empty(); },
          this));
    }
    taken.swap(incoming_);
    stop = stop_;
  }
  for (Sequence* seq : taken) {
    absl::Status added = scheduler_->Add(seq);
    if (!added.ok()) Finish(seq, added);
  }
  return !stop;
}

void BatchLoop::Loop() {
  bool busy = false;
  while (TakeIncoming(/*wait=*/scheduler_->empty())) {
    if (scheduler_->empty()) continue;
    if (!busy && on_busy_) on_busy_();
    busy = true;
    Step();
    busy = !scheduler_->empty();
  }
  for (Sequence* seq : scheduler_->RemoveIf([](const Sequence&) { return true; })) {
    Finish(seq, absl::UnavailableError("engine shutting down"));
  }
  PublishGauges();
}

void BatchLoop::Step() {
  for (Sequence* seq : scheduler_->RemoveIf(CallerCancelled)) {
    seq->output.Cancel();
    Finish(seq, absl::OkStatus());
  }
  ScheduledStep scheduled = scheduler_->Schedule();
  for (auto& [seq, status] : scheduled.failed) Finish(seq, std::move(status));
  for (Sequence* seq : scheduled.preempted) {
    // A waiting sequence keeps no slabs for itself (sequence_preload.h).
    if (seq->preload != nullptr) seq->preload->Suspend();
    if (stats_ != nullptr) stats_->OnPreemption();
  }
  for (Sequence* seq : scheduled.recomputed) {
    if (seq->preload != nullptr) seq->preload->Suspend();
  }
  const std::vector<ScheduledChunk>& step = scheduled.chunks;
  if (step.empty()) {
    if (scheduler_->empty()) return;  // the failed ones were the last
    // Cannot happen while a sequence is left (the pool holds any one
    // sequence, and a running one always gets a row); never spin on it.
    for (Sequence* seq : scheduler_->RemoveIf([](const Sequence&) { return true; })) {
      Finish(seq, absl::InternalError("the step scheduler could not schedule a step"));
    }
    return;
  }
  int64_t tokens = 0;
  for (const ScheduledChunk& c : step) tokens += c.rows;
  if (stats_ != nullptr) stats_->OnSchedulerStep(static_cast<int>(step.size()), tokens);
  PublishGauges();
  const std::vector<absl::Status> status = runner_->Run(step);
  for (size_t i = 0; i < step.size(); ++i) Postprocess(step[i], status[i]);
  PublishGauges();
}

void BatchLoop::Postprocess(const ScheduledChunk& chunk, const absl::Status& status) {
  Sequence* seq = chunk.seq;
  if (absl::IsCancelled(status)) {  // is_cancelled fired inside a prefill
    seq->output.Cancel();
    Finish(seq, absl::OkStatus());
    return;
  }
  if (!status.ok()) {
    Finish(seq, status);
    return;
  }
  if (seq->prefilling()) return;  // more prompt chunks to come
  // Broken weights or activations give NaN or Inf logits: no token drawn
  // from them is an answer.
  if (seq->logits.empty() ? seq->token < 0 : !AllFinite(seq->logits)) {
    spdlog::error("the model's logits are not finite (NaN or Inf) at generated token {}",
                  seq->result.token_ids.size());
    Finish(seq, absl::InternalError(absl::StrCat(
                    "the model produced non-finite logits (NaN or Inf) at generated token ",
                    seq->result.token_ids.size(), ": its weights or activations overflowed")));
    return;
  }
  const bool first = seq->result.token_ids.empty();
  if (first && seq->callbacks.on_prefill_logits) seq->callbacks.on_prefill_logits(seq->logits);
  const bool room = seq->cache->CheckRoom(1).ok();
  // Empty logits: the decoder drew the token (on the device).
  if (seq->logits.empty() ? seq->output.AcceptToken(seq->token, room)
                          : seq->output.Accept(seq->logits, room)) {
    Finish(seq, absl::OkStatus());
    return;
  }
  // It will decode: its preferred experts come in ahead of its first decode
  // step (never for a sequence that ends with its first token), and again
  // after a preempted sequence's prefill of its prompt and tokens (a no-op
  // on every other step).
  runner_->StartPreload(seq);
}

void BatchLoop::Finish(Sequence* seq, absl::Status status) {
  scheduler_->Remove(seq);
  seq->cache.reset();  // the memory goes back before the caller wakes
  // Its preferred experts are no longer kept for it.
  if (seq->preload != nullptr) seq->preload->End();
  ReportSkipping(seq->result.expert_skipping);  // what ran, also when a step failed
  ReportCommit(seq->result.commit);
  ReportSpeculation(seq->result.speculative);
  if (status.ok()) FillTimings(seq->start, seq->output.first_token(), &seq->result);
  seq->status = std::move(status);
  PublishGauges();     // before the caller wakes: its KV blocks are free
  seq->done.Notify();  // the caller may destroy `seq` from here on
}

void BatchLoop::ReportSkipping(const ExpertSkipCounts& counts) {
  if (stats_ == nullptr) return;
  for (TokenModality m : {TokenModality::kText, TokenModality::kVisual}) {
    const uint64_t n = counts.skipped[static_cast<int>(m)];
    if (n > 0) stats_->OnExpertsSkipped(m, n);
  }
}

void BatchLoop::ReportCommit(const CommitCounts& counts) {
  if (stats_ == nullptr || counts.committed() == 0) return;
  stats_->OnExpertsCommitted(counts.committed_router, counts.committed_substitute);
}

void BatchLoop::ReportSpeculation(const SpeculativeCounts& counts) {
  if (stats_ == nullptr || counts.executed == 0) return;
  stats_->OnSpeculativeExecutions(counts.kept, counts.discarded);
}

void BatchLoop::PublishGauges() {
  if (stats_ == nullptr) return;
  stats_->SetSequences(scheduler_->running(), scheduler_->waiting());
  stats_->SetKvBlocks(pool_->used_blocks(), pool_->total_blocks());
}

}  // namespace vismoe
