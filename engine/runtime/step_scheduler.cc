#include "engine/runtime/step_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vismoe {

absl::Status CheckStepLimits(const StepLimits& limits) {
  if (limits.max_running < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_running_sequences must be >= 1, got ", limits.max_running));
  }
  if (limits.max_step_tokens < limits.max_running) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_step_tokens (", limits.max_step_tokens,
                     ") must be >= max_running_sequences (", limits.max_running,
                     "): every running sequence decodes one token per step"));
  }
  return absl::OkStatus();
}

absl::Status StepScheduler::Add(Sequence* seq) {
  const int64_t blocks = pool_->BlocksFor(seq->kv_tokens);
  if (blocks > pool_->total_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request needs ", seq->kv_tokens, " KV cache tokens; the pool has ",
                     pool_->total_blocks() * pool_->block_tokens()));
  }
  waiting_.push_back(seq);
  return absl::OkStatus();
}

std::vector<ScheduledChunk> StepScheduler::Schedule() {
  std::vector<ScheduledChunk> step;
  int64_t budget = limits_.max_step_tokens;
  for (Sequence* seq : running_) {
    if (!seq->prefilling()) {
      step.push_back({seq, 1});
      --budget;
    }
  }
  for (Sequence* seq : running_) {
    if (seq->prefilling() && budget > 0) {
      // Only chunkable prefills stay half done across steps.
      const int64_t rows = std::min(seq->prompt_tokens() - seq->prefilled, budget);
      step.push_back({seq, rows});
      budget -= rows;
    }
  }
  Admit(&budget, &step);
  return step;
}

void StepScheduler::Admit(int64_t* budget, std::vector<ScheduledChunk>* step) {
  while (!waiting_.empty() && running() < limits_.max_running) {
    Sequence* seq = waiting_.front();
    const int64_t need = seq->prompt_tokens() - seq->prefilled;
    if (seq->chunkable() ? *budget <= 0 : (need > *budget && !step->empty())) return;
    const int64_t blocks = pool_->BlocksFor(seq->kv_tokens);
    if (!pool_->TryReserve(blocks)) return;  // first come, first served: no overtaking
    seq->kv_blocks = blocks;
    waiting_.pop_front();
    running_.push_back(seq);
    const int64_t rows = seq->chunkable() ? std::min(need, *budget) : need;
    step->push_back({seq, rows});
    *budget -= rows;
  }
}

void StepScheduler::Remove(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) {
    running_.erase(it);
    pool_->Release(seq->kv_blocks);
    seq->kv_blocks = 0;
    return;
  }
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
}

std::vector<Sequence*> StepScheduler::RemoveIf(
    const std::function<bool(const Sequence&)>& pred) {
  std::vector<Sequence*> out;
  for (Sequence* seq : running_) {
    if (pred(*seq)) out.push_back(seq);
  }
  for (Sequence* seq : waiting_) {
    if (pred(*seq)) out.push_back(seq);
  }
  for (Sequence* seq : out) Remove(seq);
  return out;
}

}  // namespace vismoe
