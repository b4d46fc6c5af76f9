// TextDecoder: what the engine needs from a language model, and the input of
// one forward step. The decoder of a family is written once over a backend's
// DecoderOps (engine/backend/decoder_ops.h), so every backend takes the same
// DecoderInput, gets experts from an ExpertProvider and returns host fp32
// logits; the engine's sampling, stop handling and observers are
// backend-independent.
// Thread safety: as the implementations say (immutable after Create; one
// Forward per KV cache at a time).
#ifndef VISMOE_ENGINE_ARCH_TEXT_DECODER_H_
#define VISMOE_ENGINE_ARCH_TEXT_DECODER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/kv_cache.h"
#include "engine/backend/kv_pool.h"
#include "engine/core/commit_miss_policy.h"
#include "engine/core/expert_skipping.h"
#include "engine/core/phase.h"
#include "engine/core/routing.h"
#include "engine/core/speculative_execution.h"
#include "engine/core/token_draw.h"
#include "engine/model/model_config.h"
#include "engine/offload/expert_provider.h"

namespace vismoe {

// The new tokens of one forward step.
struct DecoderInput {
  absl::Span<const int> tokens;
  // Row-major [3][n] (t, h, w) absolute positions of the new tokens. Empty
  // means text positions cache_length + i on every axis.
  std::vector<int64_t> positions;
  // [num_visual, hidden] rows that replace the embeddings of the tokens equal
  // to image_token_id, in order; num_visual must equal their count.
  const float* visual_embeds = nullptr;
  int64_t num_visual = 0;
  // DeepStack: deepstack[k] [num_visual, hidden] is added to the visual rows
  // after decoder layer k.
  std::vector<const float*> deepstack;
  Phase phase = Phase::kPrefill;
  // LongRoPE (TextConfig::longrope): the sequence length whose scale this
  // step's rows take -- a prefill's whole length (prompt and recomputed
  // tokens), however it is chunked, as transformers prefills it at once;
  // 0 = the step's last position + 1.
  int64_t rope_length = 0;
  // Token compression (VisMMOE 3.2): when set, called once, right before
  // decoder layer `compress_before_layer` runs (after the pinned prefix), and
  // returns the rows of the new tokens to keep: strictly ascending, in [0, n),
  // non-empty. The other rows leave the hidden states; layers >=
  // compress_before_layer store only the kept rows in their KV cache (the step
  // ends with KvCache::Advance(n, compress_before_layer, kept)). Kept tokens
  // keep their positions. With all_logits, logits are those of the kept rows.
  std::function<absl::StatusOr<std::vector<int64_t>>()> select_kept_rows;
  int compress_before_layer = 0;
  bool all_logits = false;             // logits of every new token, else only the last
  RouterObserver* observer = nullptr;  // optional
  std::function<bool()> is_cancelled;  // optional; polled between layers
  // MoDES expert skipping (engine/core/expert_skipping.h) of this sequence's
  // rows; null = off, the exact path. Observers see the routing with its
  // skipped mask. Not owned.
  const ExpertSkipping* expert_skipping = nullptr;
  // Where the rule's counts accumulate (optional, with expert_skipping).
  ExpertSkipCounts* skip_counts = nullptr;
  // The commit miss policy (paper 003, engine/core/commit_miss_policy.h) of
  // this sequence's decode rows; null = fetch, the exact path. Prefill rows
  // always fetch. Observers see the router's own routing. Not owned.
  const CommitMissPolicy* commit = nullptr;
  // The sequence's first decode step: its first MoE layer follows the router
  // (paper 003, 4.1: no prediction precedes it).
  bool first_decode_step = false;
  // Where the rule's counts accumulate (optional, with commit).
  CommitCounts* commit_counts = nullptr;
  // Speculative execution (paper 004, engine/core/speculative_execution.h)
  // of this sequence's decode rows; null = off, the exact path. Prefill rows
  // never speculate. Needs a backend that supports it. Not owned.
  const SpeculativeExecution* speculative = nullptr;
  // Where its counts and times accumulate (optional, with speculative).
  SpeculativeCounts* speculative_counts = nullptr;
};

// One sequence of a batched forward step.
struct DecoderBatchEntry {
  const DecoderInput* input = nullptr;
  KvCache* cache = nullptr;              // this sequence's own cache
  std::vector<float>* logits = nullptr;  // its logits, as Forward writes them
  // Non-null: the caller needs this entry's next token, not its logits.
  // When every entry of a step says so (and none asks for all_logits), the
  // decoder writes each entry's token here -- drawn by `draw` from the
  // logits it would have returned (TokenPicker; GreedyArgmax when `draw` is
  // null or greedy), or -1 when they are not finite -- and leaves its logits
  // empty, so a device backend copies back token ids only; otherwise the
  // logits are written and this is left alone.
  int* token = nullptr;
  const TokenDraw* draw = nullptr;
};

class TextDecoder {
 public:
  virtual ~TextDecoder() = default;

  // A KV cache of `capacity` tokens with a pool of its own in the backend's
  // memory (device memory on CUDA, so this can fail): one sequence alone.
  virtual absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t capacity) const = 0;
  // A KV pool of `blocks` blocks of `block_tokens` tokens in the backend's
  // memory, allocated now, for caches of several sequences
  // (KvCache(pool, capacity)).
  virtual absl::StatusOr<std::unique_ptr<KvPool>> CreateKvPool(int64_t blocks,
                                                               int64_t block_tokens) const = 0;
  // Runs the new tokens, appending to `cache` (over this decoder's
  // CreateKvCache or CreateKvPool) and taking the blocks they need from its
  // pool, and writes host logits [tokens or 1, vocab]. InvalidArgument for bad
  // input (token id out of range, visual count mismatch, position shape),
  // ResourceExhausted when the cache is full or its pool has no free block
  // for the new tokens, Cancelled when is_cancelled fired (the cache is then
  // left unchanged in length).
  virtual absl::Status Forward(const DecoderInput& input, KvCache* cache, ExpertProvider* experts,
                               std::vector<float>* logits) const = 0;
  // Runs several sequences as one step: each entry's result is what Forward
  // gives it alone (bit for bit on the CPU backend), but every MoE layer asks
  // `experts` once for the union of the batch's experts. Each entry keeps its
  // own positions, visual rows, token compression and observer; a step whose
  // entries differ in phase asks for its experts as prefill. The whole
  // batch fails if one entry is invalid (no cache advances; blocks an entry
  // took for its new tokens stay with its cache); an error that belongs to
  // one entry (its input, its KV room, its token compression) names it
  // (FailedEntry), so the caller can end that sequence and run the step again
  // without it. The step stops with Cancelled only when every entry's
  // is_cancelled fires (polled between layers, and by an expert provider
  // blocked on a copy: ExpertProvider::SetStepInterrupt); a caller drops the
  // cancelled entries of a step that goes on between steps.
  virtual absl::Status ForwardBatch(absl::Span<const DecoderBatchEntry> batch,
                                    ExpertProvider* experts) const = 0;
  virtual const ModelConfig& config() const = 0;
  // "cpu" or "cuda".
  virtual const char* backend() const = 0;
  // Whether DecoderInput::speculative can run on this decoder's backend.
  virtual bool supports_speculative_execution() const { return false; }
};

// An error of entry `entry` of a batch: `status` carrying the entry's index.
absl::Status EntryError(size_t entry, absl::Status status);
// The entry an error of ForwardBatch belongs to; nullopt for an error of the
// whole step (a device error, a bad batch).
std::optional<size_t> FailedEntry(const absl::Status& status);
// `status` without the entry index (what the entry's sequence is told).
absl::Status WithoutEntry(absl::Status status);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_TEXT_DECODER_H_
