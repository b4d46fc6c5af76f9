// StepScheduler: decides what each forward step of the engine runs
// (iteration-level batching, as in vLLM / nano-vllm). Sequences join
// (Add) and leave (Remove) between steps. A step holds
//   1. one decode token of every running sequence that has finished its
//      prefill, oldest first; a sequence whose next token needs a KV block
//      when none is free preempts the youngest running sequence (which gives
//      its blocks back and goes to the head of the queue, to recompute its
//      tokens when it runs again), or itself when it is the youngest;
//   2. the next chunk of every running sequence still prefilling, and
//   3. unless step 1 preempted, waiting sequences admitted first come, first
//      served while there are fewer than max_running sequences and the KV
//      pool has the blocks of their prefill plus their first decode token,
//      with one block to spare for each sequence already running,
// all within max_step_tokens rows: a long prompt is prefilled in chunks
// beside the others' decoding instead of stalling them. A prompt that cannot
// be chunked (token compression selects over the whole prompt) waits for a
// step with room for all of it, or runs alone when nothing else runs.
//
// KV blocks: a sequence takes the blocks of its prefill when admitted and one
// more block each time its decoding fills the last (KvCache::Reserve on the
// engine's pool), and gives them all back when it leaves or is preempted.
// The spare block per running sequence: each decoding sequence crosses at
// most one block boundary in block_tokens steps, so an admission leaves the
// running sequences room to grow for that long instead of forcing a
// preemption at their next boundary.
//
// Thread safety: none; used by the engine's step thread.
// Ownership: borrows the sequences (owned by their Generate calls) and the
// KV pool.
#ifndef VISMOE_ENGINE_RUNTIME_STEP_SCHEDULER_H_
#define VISMOE_ENGINE_RUNTIME_STEP_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/kv_pool.h"
#include "engine/runtime/sequence.h"

namespace vismoe {

struct StepLimits {
  int max_running = 8;             // sequences in a step
  int64_t max_step_tokens = 2048;  // rows of a step (decode tokens + prefill chunks)
  // LongRoPE (TextConfig::longrope, its original_max_position_embeddings; 0
  // otherwise): a sequence about to decode with this many KV rows is
  // recomputed instead -- its rows rebuilt by a prefill of all its tokens,
  // now at long_mscale (DecoderInput::rope_length) -- as transformers'
  // PhiMoE generate does when a sequence crosses the original context.
  int64_t longrope_recompute_at = 0;
};

// InvalidArgument naming the limit when one is < 1 or max_step_tokens <
// max_running (every running sequence needs a row to decode).
absl::Status CheckStepLimits(const StepLimits& limits);

// The most rows one step carries: max_step_tokens, or a whole compressed
// prompt (up to max_context tokens) that runs alone over the budget -- and
// never more than the KV pool's kv_tokens, which hold every row of a step.
// Device scratch is sized by it.
int64_t MaxStepRows(const StepLimits& limits, int64_t max_context, int64_t kv_tokens);

// One sequence's rows in a step: the next `rows` tokens of its prefill while
// prefilling, else its one decode token.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t rows = 0;
};

// What Schedule decided.
struct ScheduledStep {
  std::vector<ScheduledChunk> chunks;  // empty when nothing can run
  // Sent back to waiting this step (their blocks freed), youngest first.
  std::vector<Sequence*> preempted;
  // Sent back to waiting to be recomputed (StepLimits::longrope_recompute_at).
  std::vector<Sequence*> recomputed;
  // Taken out: the pool cannot hold them even alone; finish them with the status.
  std::vector<std::pair<Sequence*, absl::Status>> failed;
};

class StepScheduler {
 public:
  // REQUIRES: CheckStepLimits(limits).ok(); pool non-null and the pool of
  // every added sequence's cache.
  StepScheduler(const StepLimits& limits, KvPool* pool) : limits_(limits), pool_(pool) {}

  // Queues a sequence. InvalidArgument when its KV need (kv_tokens) exceeds
  // the whole pool (it could never run).
  absl::Status Add(Sequence* seq);
  ScheduledStep Schedule();
  // Takes a sequence out (waiting or running) and frees its blocks.
  void Remove(Sequence* seq);
  // Removes and returns the sequences for which `pred` is true.
  std::vector<Sequence*> RemoveIf(const std::function<bool(const Sequence&)>& pred);

  bool empty() const { return running_.empty() && waiting_.empty(); }
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }

 private:
  // Step 1 of the class comment: decode tokens, growing (and preempting).
  void ScheduleDecodes(int64_t* budget, ScheduledStep* step);
  // Step 3; `budget` is the rows left in the step.
  void Admit(int64_t* budget, std::vector<ScheduledChunk>* chunks);
  // Blocks a sequence takes when admitted: its prefill and first decode token.
  int64_t AdmissionBlocks(const Sequence& seq) const;
  // Moves the youngest running sequence (running_.back()) back to waiting.
  void PreemptYoungest(ScheduledStep* step);
  // Moves running_[index] to the front of waiting, its blocks freed, to
  // prefill its prompt and generated tokens again.
  void SendBack(size_t index);

  const StepLimits limits_;
  KvPool* pool_;
  std::vector<Sequence*> running_;  // in admission order
  std::deque<Sequence*> waiting_;   // preempted ones first
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_STEP_SCHEDULER_H_
