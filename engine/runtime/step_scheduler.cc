#include "engine/runtime/step_scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vismoe {

absl::Status CheckStepLimits(const StepLimits& limits) {
  if (limits.max_running < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_running_sequences must be >= 1, got ", limits.max_running));
  }
  if (limits.max_step_tokens < limits.max_running) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_step_tokens (", limits.max_step_tokens, ") must be >= max_running_sequences (",
        limits.max_running, "): every running sequence decodes one token per step"));
  }
  return absl::OkStatus();
}

int64_t MaxStepRows(const StepLimits& limits, int64_t max_context, int64_t kv_tokens) {
  return std::min(std::max(limits.max_step_tokens, max_context), kv_tokens);
}

absl::Status StepScheduler::Add(Sequence* seq) {
  const int64_t blocks = pool_->BlocksFor(seq->kv_tokens);
  if (blocks > pool_->total_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("the request needs ", seq->kv_tokens,
                                                   " KV cache tokens; the pool has ",
                                                   pool_->total_blocks() * pool_->block_tokens()));
  }
  waiting_.push_back(seq);
  return absl::OkStatus();
}

ScheduledStep StepScheduler::Schedule() {
  ScheduledStep step;
  int64_t budget = limits_.max_step_tokens;
  ScheduleDecodes(&budget, &step);
  for (Sequence* seq : running_) {
    if (seq->prefilling() && budget > 0) {
      // Only chunkable pieces stay half done across steps.
      const int64_t rows = std::min(seq->piece_left(), budget);
      step.chunks.push_back({seq, rows});
      budget -= rows;
    }
  }
  if (step.preempted.empty()) Admit(&budget, &step.chunks);
  return step;
}

void StepScheduler::SendBack(size_t index) {
  Sequence* seq = running_[index];
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  seq->cache->Release();
  seq->prefilled = 0;
  seq->replay = static_cast<int64_t>(seq->result.token_ids.size());
  waiting_.push_front(seq);  // before any sequence that never ran
}

// Oldest first; a sequence that needs a block takes it, preempting from the
// youngest end while none is free (vLLM's policy), so the oldest always
// advance. A victim is always younger than the sequence growing, so it has
// no chunk in the step yet.
void StepScheduler::ScheduleDecodes(int64_t* budget, ScheduledStep* step) {
  for (size_t i = running_.size(); i-- > 0;) {  // youngest first, so the oldest ends up in front
    Sequence* seq = running_[i];
    if (!seq->prefilling() && limits_.longrope_recompute_at > 0 &&
        seq->cache->length() == limits_.longrope_recompute_at) {
      SendBack(i);
      step->recomputed.push_back(seq);
    }
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* seq = running_[i];
    if (seq->prefilling()) continue;
    absl::Status grown = seq->cache->Reserve(seq->cache->length() + 1);
    while (!grown.ok() && running_.back() != seq) {
      PreemptYoungest(step);
      grown = seq->cache->Reserve(seq->cache->length() + 1);
    }
    if (grown.ok()) {
      step->chunks.push_back({seq, 1});
      --*budget;
      continue;
    }
    // `seq` is the youngest now and still cannot grow.
    if (i > 0) {
      PreemptYoungest(step);
      return;
    }
    // Alone, and the pool cannot hold it (Add admits no sequence larger than
    // the pool, so this is a broken invariant, reported rather than spun on).
    absl::Status failed = absl::ResourceExhaustedError(absl::StrCat(
        "the KV pool of ", pool_->total_blocks(), " blocks cannot hold the sequence's ",
        seq->cache->length() + 1, " tokens: ", grown.message()));
    running_.erase(running_.begin());
    seq->cache->Release();
    step->failed.push_back({seq, std::move(failed)});
    return;
  }
}

void StepScheduler::PreemptYoungest(ScheduledStep* step) {
  Sequence* seq = running_.back();
  SendBack(running_.size() - 1);
  ++seq->preemptions;
  step->preempted.push_back(seq);
}

int64_t StepScheduler::AdmissionBlocks(const Sequence& seq) const {
  return pool_->BlocksFor(std::min(seq.prefill_tokens() + 1, seq.kv_tokens));
}

void StepScheduler::Admit(int64_t* budget, std::vector<ScheduledChunk>* chunks) {
  while (!waiting_.empty() && running() < limits_.max_running) {
    Sequence* seq = waiting_.front();
    const int64_t need = seq->piece_left();
    if (seq->chunkable() ? *budget <= 0 : (need > *budget && !chunks->empty())) return;
    const int64_t blocks = AdmissionBlocks(*seq);
    // First come, first served: no overtaking.
    if (pool_->free_blocks() < blocks + running()) return;
    if (!seq->cache->Reserve(std::min(seq->prefill_tokens() + 1, seq->kv_tokens)).ok()) return;
    waiting_.pop_front();
    running_.push_back(seq);
    const int64_t rows = seq->chunkable() ? std::min(need, *budget) : need;
    chunks->push_back({seq, rows});
    *budget -= rows;
  }
}

void StepScheduler::Remove(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) {
    running_.erase(it);
    seq->cache->Release();
    return;
  }
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
}

std::vector<Sequence*> StepScheduler::RemoveIf(const std::function<bool(const Sequence&)>& pred) {
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
