// RoutingTraceRecorder: records what each MoE layer routed to during forward
// steps (a RouterObserver), and turns the records into training / evaluation
// samples for the lookahead predictors (VisMMOE 3.3, Eq. 6-9).
// Per (step, MoE layer): the distinct experts the step's rows activated, the
// histogram h_r (fraction of rows routed to each expert) and the MoE input
// mean-pooled over the step's rows (after compression these are the retained
// tokens only, Eq. 6).
// Thread safety: none; observes the one forward thread.
#ifndef VISMOE_ENGINE_CALIBRATE_ROUTING_TRACE_H_
#define VISMOE_ENGINE_CALIBRATE_ROUTING_TRACE_H_

#include <vector>

#include "absl/types/span.h"
#include "engine/core/routing.h"
#include "engine/calibrate/mlp_trainer.h"

namespace vismoe {

struct LayerRecord {
  int layer = 0;                   // decoder layer index
  std::vector<int> experts;        // distinct, ascending
  std::vector<float> histogram;    // [num_experts]
  std::vector<float> hidden_mean;  // [hidden]
  // Per row: the router's certainty, KL(softmax || uniform) in nats (the
  // commit miss policy's gate); empty when the routing had no logits.
  std::vector<float> certainty;
};

// One forward step: its MoE layers in order.
struct StepRecord {
  Phase phase = Phase::kPrefill;
  std::vector<LayerRecord> layers;
};

class RoutingTraceRecorder final : public RouterObserver {
 public:
  // REQUIRES: hidden_size is the MoE input width (TextConfig::hidden_size).
  explicit RoutingTraceRecorder(int hidden_size) : hidden_size_(hidden_size) {}
  void OnRouting(Phase phase, int layer, const float* hidden,
                 const RouterResult& routing) override;
  // Accumulates the MoE output rows per decoder layer (for the router-lookahead
  // default vectors d_l = mean MoE output, paper 004 section 3.2).
  void OnMoeOutput(Phase phase, int layer, const float* out, int64_t n) override;
  // Keeps the last summary (after compression when the engine compresses).
  void OnVisualSummary(absl::Span<const float> summary) override;

  // A new step starts when a layer index does not grow.
  const std::vector<StepRecord>& steps() const { return steps_; }
  // h_v of the request; empty for text-only requests.
  const std::vector<float>& visual_summary() const { return visual_summary_; }
  // Per decoder layer (indexed by layer; empty vectors for layers never seen):
  // the sum of the MoE output rows [hidden] and how many rows were summed.
  const std::vector<std::vector<double>>& moe_output_sum() const { return moe_sum_; }
  const std::vector<int64_t>& moe_output_rows() const { return moe_rows_; }
  void Clear() {
    steps_.clear();
    visual_summary_.clear();
    moe_sum_.clear();
    moe_rows_.clear();
  }

 private:
  int hidden_size_;
  std::vector<StepRecord> steps_;
  std::vector<float> visual_summary_;
  std::vector<std::vector<double>> moe_sum_;
  std::vector<int64_t> moe_rows_;
};

// One lookahead sample with what actually came next.
struct LookaheadExample {
  LookaheadSample sample;
  int step = 0;                   // index into the trace
  int moe_index = 0;              // position of the layer among the step's MoE layers
  std::vector<int> next_experts;  // E_{l+1}: what Hot Recall is measured against
};

// Eq. 7 features x_l = [h_r(l); h_r(l-1); h_h(l); h_v] (h_r(l-1) zero at the
// first layer) and Eq. 9 targets, for every MoE layer but the last of every
// step of `phase`. `visual_summary` (h_v) may be empty (text-only).
std::vector<LookaheadExample> BuildLookaheadExamples(const std::vector<StepRecord>& steps,
                                                     Phase phase,
                                                     absl::Span<const float> visual_summary,
                                                     int window, float gamma);

// Hot Recall@B: the fraction of `actual` among the B highest `scores` (ties to
// the lower id); 1 when `actual` is empty.
double HotRecallAtB(absl::Span<const float> scores, absl::Span<const int> actual, int b);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_ROUTING_TRACE_H_
