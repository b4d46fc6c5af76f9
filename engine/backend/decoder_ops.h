// DecoderOps: the operations a backend provides to run a MoE text decoder.
//
// A step may carry several sequences (a batch): their rows are concatenated,
// every op but attention works on all rows at once (so a MoE layer fetches
// each expert once for every sequence that routes to it), and attention runs
// each sequence's rows over its own KV cache.
//
// The decoder loop (positions, visual scatter, token compression, DeepStack,
// observers, the KV cache protocol) is written once, in engine/arch, over
// these ops; each backend (engine/backends/cpu, engine/backends/cuda)
// implements them on its own memory. A forward step's activations live in a
// DecoderStep the backend creates: the residual stream `hs`, the normed block
// input `x` and the MoE output `y`, each [n, hidden] in the backend's memory
// and precision. The ops are coarse (a whole attention block, a whole MoE
// block) so that a backend can fuse inside them (the CUDA attention folds the
// residual add into the o_proj GEMM).
//
// Exactness: the CPU backend is the fp32 reference and matches transformers;
// other backends are compared against it op by op
// (tests/engine/backend/backend_ops_test.cc) and end to end.
//
// Thread safety: DecoderOps is immutable after creation; BeginStep may be
// called from several threads with different KV caches (a backend that cannot
// run steps concurrently serialises them for the life of the DecoderStep). A
// DecoderStep is used by one thread.
// Ownership: a DecoderStep borrows its KvCaches (and their pools), its
// input's buffers and the DecoderOps that made it; all must outlive it.
#ifndef VISMOE_ENGINE_BACKEND_DECODER_OPS_H_
#define VISMOE_ENGINE_BACKEND_DECODER_OPS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/kv_cache.h"
#include "engine/backend/kv_pool.h"
#include "engine/core/phase.h"
#include "engine/core/routing.h"
#include "engine/core/speculative_execution.h"
#include "engine/core/token_draw.h"
#include "engine/offload/expert_provider.h"

namespace vismoe {

// One sequence of a step: its `rows` consecutive rows (sequences follow each
// other in the order listed) attend over, and append to, `cache`, which holds
// blocks for them (KvCache::Reserve).
struct StepSequence {
  KvCache* cache = nullptr;
  int64_t rows = 0;
  int64_t rope_length = 0;  // DecoderInput::rope_length
};

// What a step starts from, validated by the decoder loop. Rows of all
// sequences are concatenated: tokens, positions, visual rows and the visual
// and DeepStack rows are those of the whole step.
struct StepInput {
  absl::Span<const int> tokens;           // ids in [0, vocab)
  absl::Span<const int64_t> positions;    // [3][n] (t, h, w) absolute positions
  absl::Span<const int64_t> visual_rows;  // rows whose embedding is replaced, ascending
  const float* visual_embeds = nullptr;   // [visual_rows.size(), hidden], or null
  // DeepStack: deepstack[k] [visual_rows.size(), hidden] (or null) is added to
  // the visual rows after decoder layer k.
  absl::Span<const float* const> deepstack;
  // The sequences in row order (see CheckStepSequences); a step copies them.
  absl::Span<const StepSequence> sequences;
};

// OK when `input` has at least one sequence, each with >= 1 row and its own
// non-null cache holding blocks for them, and the rows sum to tokens.size();
// InvalidArgument otherwise.
absl::Status CheckStepSequences(const StepInput& input);

// The rows each sequence keeps when the step keeps rows `kept` (strictly
// ascending step rows) of sequences of `rows` rows each.
std::vector<int64_t> RowsAfterKeep(absl::Span<const int64_t> rows, absl::Span<const int64_t> kept);

// What DecoderStep::ArmSpeculation is told (engine/core/speculative_execution.h).
struct SpeculationPlan {
  int from_layer = -1;    // the MoE layer whose copy waits it fills
  int target_layer = -1;  // the next MoE layer: the experts it computes ahead
  // Step rows to predict (decode rows of the sequences that speculate), ascending.
  absl::Span<const int64_t> rows;
  const float* default_vector = nullptr;  // d of from_layer [hidden], or null (d = 0)
};

// What the host sees of a layer a backend ran with DecoderStep::DeviceMoe,
// handed over later by TakeDeferred: the routing (ids; with `observed`, the
// combine weights and router logits too) and, with `observed`, host fp32
// rows [n, hidden] of the residual after attention, the normed MoE input and
// the MoE output -- what Route, HostRows and so the observers would have
// seen had the layer run through Route and Experts.
struct DeferredLayer {
  RouterResult routing;
  const float* residual = nullptr;
  const float* normed = nullptr;
  const float* moe_out = nullptr;
};

// The two RMSNorms of a decoder layer: x = RMSNorm(hs) * w.
enum class NormSite { kInput, kPostAttention };

// Host fp32 copies of a step's activations, for observers.
enum class StepRows { kResidual, kNormed, kMoeOutput };

class DecoderStep {
 public:
  virtual ~DecoderStep() = default;

  // Keeps rows `kept` (strictly ascending, validated; each sequence keeps at
  // least one) of every activation;
  // `positions` [3][kept] and `visual_rows` (the new row of each visual token,
  // -1 once dropped) are the decoder's remapped host values.
  virtual absl::Status KeepRows(absl::Span<const int64_t> kept, absl::Span<const int64_t> positions,
                                absl::Span<const int64_t> visual_rows) = 0;
  virtual absl::Status Norm(int layer, NormSite site) = 0;
  // hs += o_proj(attention(RoPE(q_norm(q)), RoPE(k_norm(k)), v)) of x, each
  // sequence's rows over its own cache; writes each sequence's rows of `layer`
  // into its KV cache (at layer_length(layer)).
  virtual absl::Status Attention(int layer) = 0;
  // Runs `layer`'s router on x: the top-k ids always, the combine weights and
  // logits too when `with_scores` (observers need them; the ids suffice for
  // the experts, whose weights a backend may keep in its own memory).
  virtual absl::Status Route(int layer, bool with_scores, RouterResult* routing) = 0;
  // y = sum over each token's top-k of weight * expert(x), experts from the
  // provider (BeginLayer .. EndLayer), summed in a fixed order so the result
  // does not depend on the order the provider hands them out. Slots marked in
  // routing.skipped add nothing, and an expert whose every slot is skipped is
  // never declared to the provider (so never fetched). With skipped slots,
  // routing.weights must be filled (Route with_scores). Slots marked in
  // routing.speculative take the output computed ahead (ArmSpeculation)
  // times their weight instead; an expert all of whose slots are skipped or
  // speculative is not declared either.
  // REQUIRES: `routing` from this step's Route(layer) with ids in [0, E).
  virtual absl::Status Experts(int layer, Phase phase, const RouterResult& routing,
                               ExpertProvider* experts) = 0;
  // Speculative execution (engine/core/speculative_execution.h): while
  // Experts(plan.from_layer) waits on a copy, computes experts of
  // plan.target_layer for plan.rows on their quasi-hidden state
  // RMSNorm_target(hs + d) (hs as after from_layer's attention) -- the units
  // PlanSpeculation gives against experts->Availability(target), each when
  // AcquireIfResident finds its weights usable -- and times the waits and the
  // target layer's expert compute into Speculation(target). Unimplemented
  // where DecoderOps::supports_speculation() is false.
  // REQUIRES: after Attention(from_layer), before Experts(from_layer).
  virtual absl::Status ArmSpeculation(const SpeculationPlan& /*plan*/) {
    return absl::UnimplementedError("this backend has no speculative execution");
  }
  // What speculation did for `target_layer` in this step; null when it was
  // not armed for it. Valid until KeepRows or the end of the step.
  virtual const SpeculationRecord* Speculation(int /*target_layer*/) const { return nullptr; }
  virtual absl::Status AddMoeOutput() = 0;       // hs += y
  virtual absl::Status DenseMlp(int layer) = 0;  // hs += down(silu(gate(x)) * up(x))
  // Adds DeepStack feature `layer` to the visual rows still in the step.
  virtual absl::Status AddDeepStack(int layer) = 0;
  // Final norm and LM head of every row ([rows, vocab]) or of the last row of
  // each sequence ([sequences, vocab]): host fp32 logits. A backend surfaces
  // its asynchronous errors here at the latest.
  virtual absl::Status Logits(bool all_rows, std::vector<float>* logits) = 0;
  // The next token of each sequence, one per sequence, where the caller
  // needs no logits: drawn by draws[s] (TokenPicker, engine/core/
  // token_draw.h; GreedyArgmax for a greedy draw) from the row Logits(false)
  // would give, or -1 where that row holds a NaN or an infinity (AllFinite).
  // A device backend copies only the ids back; this default draws on the
  // host from Logits(false) (the CPU backend's way, and a device's fallback).
  // REQUIRES: draws.size() == the step's sequences.
  virtual absl::Status DrawTokens(absl::Span<const TokenDraw> draws, std::vector<int>* tokens);

  // ---- Pinned layers without the host (engine/backends/cuda/README.md) ----
  // Whether DeviceMoe can run `layer` in this step: the provider pins its
  // experts (ExpertProvider::LayerPinned) in memory this backend computes
  // from, in a layout and a step size it runs. May set up per-layer state.
  virtual bool PrepareDeviceMoe(int /*layer*/, ExpertProvider* /*experts*/) { return false; }
  // hs += the MoE block of `layer` on x, as Route + Experts + AddMoeOutput
  // compute it with the experts of experts->PinnedWeights, but without
  // asking the host anything: no lookup in `experts`, no routing brought to
  // the host, no wait. What the host would have seen is staged for
  // TakeDeferred(layer); `observed` stages the scores and rows too.
  // REQUIRES: PrepareDeviceMoe(layer, experts) returned true in this step;
  // after Norm(layer, kPostAttention).
  virtual absl::Status DeviceMoe(int layer, Phase phase, ExpertProvider* experts, bool observed);
  // Whether TakeDeferred(layer) would return without waiting.
  virtual absl::StatusOr<bool> DeferredReady(int layer);
  // The staged view of DeviceMoe(layer), waiting for it; its pointers stay
  // valid until the next TakeDeferred, KeepRows or the end of the step.
  // REQUIRES: every DeviceMoe layer taken once, in the order they ran.
  virtual absl::StatusOr<DeferredLayer> TakeDeferred(int layer);
  // [n, hidden] host fp32 rows of an activation, valid until the next op.
  virtual absl::StatusOr<const float*> HostRows(StepRows which) = 0;
};

class DecoderOps {
 public:
  virtual ~DecoderOps() = default;

  // "cpu" or "cuda".
  virtual const char* name() const = 0;
  // Whether its steps implement ArmSpeculation (speculative execution).
  virtual bool supports_speculation() const { return false; }
  // InvalidArgument when one step of `tokens` rows exceeds what the backend
  // was sized for (checked before anything else about the step).
  virtual absl::Status CheckStepSize(int64_t /*tokens*/) const { return absl::OkStatus(); }
  // A KV pool of `blocks` blocks of `block_tokens` tokens in the backend's
  // memory, allocated now (ResourceExhausted when the memory is not there).
  virtual absl::StatusOr<std::unique_ptr<KvPool>> CreateKvPool(int64_t blocks,
                                                               int64_t block_tokens) const = 0;
  // A KV cache of `capacity` tokens with a pool of its own (one sequence
  // alone: tools, tests; an engine shares one pool among its sequences).
  absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t capacity) const;
  // Starts a step of input.tokens.size() rows over input.sequences (caches
  // over pools from CreateKvPool): hs = the token embeddings with the visual
  // rows replaced. InvalidArgument when CheckStepSequences fails.
  virtual absl::StatusOr<std::unique_ptr<DecoderStep>> BeginStep(const StepInput& input) const = 0;
  // A step of one sequence: every row on `cache` (input.sequences ignored).
  absl::StatusOr<std::unique_ptr<DecoderStep>> BeginStep(const StepInput& input,
                                                         KvCache* cache) const;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKEND_DECODER_OPS_H_
