// StepScheduler: decides what each forward step of the engine runs
// (iteration-level batching, as in vLLM / nano-vllm). Sequences join
// (Add) and leave (Remove) between steps. A step holds
//   1. one decode token of every running sequence that has finished its
//      prefill,
//   2. the next chunk of every running sequence still prefilling, and
//   3. waiting sequences admitted first come, first served while there are
//      fewer than max_running sequences and their KV blocks are free,
// all within max_step_tokens rows: a long prompt is prefilled in chunks
// beside the others' decoding instead of stalling them. A prompt that cannot
// be chunked (token compression selects over the whole prompt) waits for a
// step with room for all of it, or runs alone when nothing else runs.
//
// Thread safety: none; used by the engine's step thread.
// Ownership: borrows the sequences (owned by their Generate calls) and the
// block pool.
#ifndef VISMOE_ENGINE_RUNTIME_STEP_SCHEDULER_H_
#define VISMOE_ENGINE_RUNTIME_STEP_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "engine/runtime/kv_block_pool.h"
#include "engine/runtime/sequence.h"

namespace vismoe {

struct StepLimits {
  int max_running = 8;           // sequences in a step
  int64_t max_step_tokens = 2048;  // rows of a step (decode tokens + prefill chunks)
};

// InvalidArgument naming the limit when one is < 1 or max_step_tokens <
// max_running (every running sequence needs a row to decode).
absl::Status CheckStepLimits(const StepLimits& limits);

// One sequence's rows in a step: the next `rows` tokens of its prompt while
// prefilling, else its one decode token.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t rows = 0;
};

class StepScheduler {
 public:
  // REQUIRES: CheckStepLimits(limits).ok(); pool non-null.
  StepScheduler(const StepLimits& limits, KvBlockPool* pool) : limits_(limits), pool_(pool) {}

  // Queues a sequence. InvalidArgument when its KV need exceeds the whole pool
  // (it could never run).
  absl::Status Add(Sequence* seq);
  // The next step's chunks (empty when nothing can run). Admitted sequences
  // hold their blocks (seq->kv_blocks) until Remove.
  std::vector<ScheduledChunk> Schedule();
  // Takes a sequence out (waiting or running) and frees its blocks.
  void Remove(Sequence* seq);
  // Removes and returns the sequences for which `pred` is true.
  std::vector<Sequence*> RemoveIf(const std::function<bool(const Sequence&)>& pred);

  bool empty() const { return running_.empty() && waiting_.empty(); }
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }

 private:
  // Step 3 of the class comment; `budget` is the rows left in the step.
  void Admit(int64_t* budget, std::vector<ScheduledChunk>* step);

  const StepLimits limits_;
  KvBlockPool* pool_;
  std::vector<Sequence*> running_;  // in admission order
  std::deque<Sequence*> waiting_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_STEP_SCHEDULER_H_
