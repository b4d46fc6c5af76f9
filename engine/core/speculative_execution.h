// Speculative execution of prefetched experts (paper 004, "Speculating
// Experts", section 4), the rule as host values; a backend runs the
// computation (DecoderStep::ArmSpeculation, engine/backend/decoder_ops.h) and
// the decoder applies the rule (engine/arch/qwen3_vl_moe.cc). Lossy, opt-in;
// decode rows only. See engine/policy/speculative_execution.md.
//
// While MoE layer L of a decode step waits on an expert copy, the forward
// thread -- idle otherwise -- computes experts of the next MoE layer L' on the
// predicted input: the quasi-hidden state q = RMSNorm_{L'}(r_L + d_L) (paper
// 004, section 3.2: r_L the residual after L's attention, d_L L's default
// vector from the calibration profile, zero without one; normed by L''s
// post-attention norm, as L''s router input is). The candidates of a row are
// the top-k of L''s router applied to q -- what the router-lookahead
// predictor prefetches for it -- among the experts the provider holds or is
// copying (PlanSpeculation); one is computed only when its weights are usable
// without waiting. When L''s router has run, a (token, slot) whose expert was
// computed ahead for that token keeps the speculative output, weighted by the
// router's own weight and summed in the fixed order (ascending expert id)
// like every other slot (MatchSpeculation); the others are computed as
// always, and a speculative output the router did not pick is discarded.
//
// Time: a kept expert's compute ran inside a copy wait, so it leaves the
// critical path -- unless the target layer waits on a copy itself, which the
// removed compute would have overlapped. Per (step, target layer):
// t_copy = the wait on copies at L while armed, t_compute = the expert compute
// at L' (kept speculative outputs included); saved = max(0, kept compute -
// wait at L') <= bound = min(t_copy, t_compute), the paper's per-layer bound
// (Eq. 1) restricted to what speculation can move.
//
// Thread safety: plain values and pure functions.
#ifndef VISMOE_ENGINE_CORE_SPECULATIVE_EXECUTION_H_
#define VISMOE_ENGINE_CORE_SPECULATIVE_EXECUTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/core/commit_miss_policy.h"
#include "engine/core/routing.h"

namespace vismoe {

// The engine's setting: on for every sequence that points at it.
struct SpeculativeExecution {
  // [num_layers * hidden_size]: the default vector d_l of each decoder layer
  // (the calibration profile's, as router-lookahead uses); empty = d = 0.
  std::vector<float> default_vectors;
  int hidden_size = 0;

  // d_layer ([hidden_size]), or null for d = 0.
  const float* DefaultVector(int layer) const;
};

// InvalidArgument naming `what` when the default vectors are neither empty
// nor num_layers x hidden_size values.
absl::Status ValidateSpeculativeExecution(const SpeculativeExecution& s, int num_layers,
                                          const char* what);

// One piece of speculative work: expert `expert` of the target layer over
// rows `rows` (indices into the predicted rows, ascending).
struct SpeculationUnit {
  int expert = -1;
  std::vector<int64_t> rows;
  double weight = 0;  // sum of the predicted combine weights over `rows`
};

// The units worth computing ahead for a target layer whose router, applied
// to the predicted rows' quasi-hidden states, gave `predicted` (top-k and
// weights): one per expert in some row's top-k that `avail` holds or is
// copying (a copy not yet queued would not land before the wait ends), most
// predicted weight first (ties: lower id). None when avail.all: every expert
// of the layer is there, so there is no copy to hide and the rule stays off.
std::vector<SpeculationUnit> PlanSpeculation(const RouterResult& predicted,
                                             const ExpertAvailability& avail);

// One (token, expert) computed ahead.
struct SpeculatedPair {
  int64_t row = 0;  // step row
  int expert = 0;
  double seconds = 0;  // its share of the compute time
};

// What speculation did for one target layer in one step; the backend fills
// it, the decoder reads it.
struct SpeculationRecord {
  int layer = -1;                     // the target layer
  std::vector<int64_t> rows;          // the step rows it was armed for, ascending
  std::vector<SpeculatedPair> pairs;  // computed ahead, by (row, expert)
  double wait_before = 0;  // t_copy: the wait on copies at the previous MoE layer while armed
  double overrun = 0;      // of it, at most this long after the awaited copy had landed
  double compute = 0;      // t_compute: expert compute at the target layer, kept outputs included
  double wait_at_target = 0;  // the wait on copies at the target layer

  // The pair (row, expert), or null.
  const SpeculatedPair* Find(int64_t row, int expert) const;
};

// What the rule did for a sequence, in (token, expert) pairs and seconds.
struct SpeculativeCounts {
  uint64_t executed = 0;       // computed ahead on the predicted input
  uint64_t kept = 0;           // the router picked it: the output entered the sum
  uint64_t discarded = 0;      // the router did not: thrown away
  double compute_seconds = 0;  // spent computing them (inside copy waits)
  double kept_seconds = 0;     // of that, the kept ones'
  double saved_seconds = 0;    // taken off the critical path (see the file comment)
  double bound_seconds = 0;    // sum of min(t_copy, t_compute) over armed layers
  double wait_seconds = 0;     // t_copy summed (the waits speculation could fill)
  double overrun_seconds = 0;  // at most this much delay added to those waits

  void Add(const SpeculativeCounts& o);
};

// Marks in routing->speculative (allocated [n_all, top_k] on the first mark)
// the slots of rows [first, first + n) whose final expert was computed ahead
// for that row by `record`, and counts the sequence's pairs (executed, kept,
// discarded, their seconds) into `counts` (may be null). Skipped slots are
// never marked (they add nothing).
void MatchSpeculation(const SpeculationRecord& record, int64_t first, int64_t n,
                      RouterResult* routing, SpeculativeCounts* counts);

// After the target layer's experts ran: the sequence of rows [first, first +
// n) gets its share of the layer's t_copy, overrun and bound (by its armed
// rows) and of the time saved (by its kept seconds). REQUIRES: `routing` as
// MatchSpeculation marked it.
void AccountSpeculationTime(const SpeculationRecord& record, const RouterResult& routing,
                            int64_t first, int64_t n, SpeculativeCounts* counts);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_SPECULATIVE_EXECUTION_H_
