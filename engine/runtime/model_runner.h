// ModelRunner: runs one scheduled step on the model. For each sequence it
// builds the step's DecoderInput (its next prefill chunk -- the slice of
// positions, visual rows and DeepStack rows that chunk covers, or after a
// preemption its generated tokens again -- or its one decode token), sets a
// sequence up on its first chunk (the vision tower over its images, token
// compression; again the compression when a preempted sequence restarts),
// runs every sequence as one TextDecoder::ForwardBatch over their KV caches
// (which hold their blocks: the scheduler reserved them), and gives each its
// share of the step's offload counters.
//
// Thread safety: none; used by the engine's step thread.
// Ownership: borrows everything in RunnerParts, which must outlive it.
#ifndef VISMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_
#define VISMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/arch/text_decoder.h"
#include "engine/arch/vision_tower.h"
#include "engine/core/stats_sink.h"
#include "engine/offload/expert_provider.h"
#include "engine/offload/offload_stats.h"
#include "engine/runtime/step_scheduler.h"

namespace vismoe {

struct RunnerParts {
  const TextDecoder* model = nullptr;
  const VisionTower* vision = nullptr;  // null without vision
  ExpertProvider* experts = nullptr;
  // The expert provider's counters since the last call (then reset).
  std::function<OffloadStats()> take_stats;
  StatsSink* stats = nullptr;  // may be null
  int image_token_id = -1;
  int compress_layer = 0;  // decoder layer token compression runs before
  // Speculative execution of every sequence's decode steps; null = off.
  const SpeculativeExecution* speculative = nullptr;
};

// Splits a step's counters among its sequences in proportion to their rows
// (integer counters by largest remainder, earliest sequence first on ties),
// so that the shares sum to the step's counters.
std::vector<OffloadStats> SplitStats(const OffloadStats& total, absl::Span<const int64_t> rows);

class ModelRunner {
 public:
  explicit ModelRunner(RunnerParts parts) : p_(std::move(parts)) {}

  // Runs `step`. Returns one status per chunk: a sequence whose setup failed
  // is left out of the step with its error; when the forward pass fails for
  // one sequence's own reason (TextDecoder's FailedEntry: its input, its
  // compression), that sequence gets the error and the others run the step
  // again without it; any other failure of the pass goes to every sequence
  // in it. On success a sequence's logits hold its last row's (or its greedy
  // token) and `prefilled` counts the chunk.
  std::vector<absl::Status> Run(absl::Span<const ScheduledChunk> step);
  // The sequence's prefill is done and it goes on decoding: starts its
  // preload (if it has one), whose copies count as its own offload counters.
  // Call between steps.
  void StartPreload(Sequence* seq);

 private:
  // First chunk: the vision tower and token compression.
  absl::Status SetUp(Sequence* seq);
  // First chunk after a preemption.
  absl::Status Restart(Sequence* seq);
  absl::Status SetUpCompression(Sequence* seq);
  // The end of a compressed prompt's prefill: usage and stats.
  void ReportCompression(Sequence* seq);
  // The chunk's DecoderInput, into seq->input.
  void BuildInput(const ScheduledChunk& chunk);
  void BuildPrefillInput(Sequence* seq, int64_t rows);
  void InstallCompression(Sequence* seq);
  // Every sequence that ran gets its share of the step's counters.
  void ShareStats(absl::Span<const ScheduledChunk> step, const std::vector<char>& ran);

  RunnerParts p_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_
