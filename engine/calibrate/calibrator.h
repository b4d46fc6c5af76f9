// Calibrator: the library behind `vismoe-calibrate` (VisMMOE 3.3-3.4).
//  1. Runs every calibration request through the Engine (all experts
//     resident, exact path, greedy) and records one routing trace per request
//     (RoutingTraceRecorder as GenerateCallbacks::router_observer).
//  2. Splits the requests (seeded, by request) into training and held-out sets;
//     trains the mlp-lookahead on the training split's prefill + decode
//     examples and averages the training split's MoE outputs into the
//     router-lookahead default vectors d_l.
//  3. Runs the held-out requests again with the history, router-lookahead and
//     mlp-lookahead predictors (built by MakeExpertPredictor) observing the
//     forward pass, and measures Hot Recall@B: after MoE layer l routes, each
//     predictor is asked for the top-B experts of the next MoE layer; recall is
//     the share of that layer's activated experts among them. Random choice is
//     its expected value B / E.
//  6. With commit_target_rate > 0: the commit miss policy's certainty
//     threshold (commit_calibrator.h) from the traces' decode tokens, and
//     per predictor paper 003's Figure 2 (mean certainty of held-out decode
//     tokens by how many of their experts the predictor's top-k held).
//  5. With skip_target_rate > 0: MoDES expert skipping's alpha(l) and
//     thresholds (skip_calibrator.h) over every request's prefill.
//  4. Eq. 10: for every valid prefix depth L, replays all traces through an
//     LRU slab cache with the slabs MakeMemoryPlan leaves at L; cost[L] =
//     misses * expert_bytes / copy_bandwidth. L_pinned = ChoosePinnedLayers.
// Thread safety: RunCalibration is a free function with no shared state.
#ifndef VISMOE_ENGINE_CALIBRATE_CALIBRATOR_H_
#define VISMOE_ENGINE_CALIBRATE_CALIBRATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/request.h"
#include "engine/calibrate/commit_calibrator.h"
#include "engine/calibrate/mlp_trainer.h"
#include "engine/calibrate/predictor_evaluator.h"
#include "engine/calibrate/routing_trace.h"
#include "engine/calibrate/skip_calibrator.h"
#include "engine/policy/calibration_profile.h"
#include "nlohmann/json.hpp"

namespace vismoe {

struct CalibrationRequest {
  std::string name;  // for progress and errors, e.g. "requests.jsonl:3"
  GenerateRequest request;
};

struct CalibratorOptions {
  std::string model_path;
  int64_t budget_bytes = 0;          // device budget Eq. 10 plans for; > 0
  double held_out = 0.25;            // fraction of requests held out, in (0, 1)
  int window = 5;                    // W (Eq. 9)
  float gamma = 0.8f;                // Eq. 9 decay
  int prefetch_count = 20;           // B; capped at the number of experts
  int l_semantic = 1;                // Eq. 10's minimum prefix depth
  double copy_bandwidth = 16e9;      // bytes/s, cost model of a slab miss
  int max_context_tokens = 32768;    // as the served engine (KV bytes in the plan)
  int64_t activation_bytes = 0;      // as OffloadOptions::activation_bytes
  int num_threads = 0;               // engine threads; 0 = all cores
  std::string backend = "cpu";       // engine backend for the traces (EngineOptions::backend)
  // Synthetic weights instead of the checkpoint's (EngineOptions::synthetic_*).
  bool synthetic_weights = false;
  uint64_t synthetic_seed = 0;
  std::string synthetic_routing = "random";
  // 0: greedy traces; > 0: sampled at this temperature, seeded per request
  // (from its name), so every pass over a request decodes the same tokens.
  // Greedy decoding of synthetic weights falls into short token cycles.
  float temperature = 0.0f;
  uint64_t seed = 0;                 // split and training
  MlpTrainOptions train;             // its seed is replaced by `seed`
  // MoDES expert skipping: the skip rate the frontier search must reach, in
  // (0, 1); 0 = do not calibrate skipping. skip_grid thresholds per modality.
  double skip_target_rate = 0;
  int skip_grid = 12;
  // Commit miss policy: the share of decode (token, MoE layer) pairs whose
  // certainty falls below the calibrated threshold, in (0, 1); 0 = do not
  // calibrate it.
  double commit_target_rate = 0;
  std::ostream* progress = nullptr;  // one line per event; null = quiet
};

struct CalibrationReport {
  CalibrationProfile profile;  // as saved
  int train_requests = 0, held_out_requests = 0;
  int train_samples = 0;  // mlp training examples (0: no mlp trained)
  float train_loss = 0;   // mean loss of the last epoch
  int train_epochs = 0;
  int prefetch_count = 0;                     // B actually used
  std::map<std::string, RecallTally> recall;  // "history", "router-lookahead", ...
  double random_recall = 0;                   // B / E
  std::vector<RecallTally> mlp_layer_recall;  // per decoder layer (predicted layer)
  int max_valid_pinned = 0;                   // Eq. 10's upper bound
  std::vector<int64_t> misses;                // per L: simulated slab misses
  std::vector<int> num_slabs;                 // per L
  int64_t expert_bytes = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::optional<SkipCalibrationReport> skipping;  // with skip_target_rate > 0
  std::optional<CommitCalibrationReport> commit;  // with commit_target_rate > 0
  std::map<std::string, CertaintyTally> certainty;  // per predictor, held-out decode tokens
  double seconds = 0;

  // The report vismoe-calibrate prints (pretty JSON).
  std::string ToJson() const;
  // Its "commit_miss" part. REQUIRES: commit.
  nlohmann::json CommitJson() const;
};

// Everything above. InvalidArgument for bad options (naming the option), fewer
// than 2 requests, or a budget that cannot hold the resident weights plus one
// slab; errors of a request name it (CalibrationRequest::name).
absl::StatusOr<CalibrationReport> RunCalibration(const CalibratorOptions& options,
                                                 const std::vector<CalibrationRequest>& requests);


// The LRU slab-cache replay of Eq. 10's cost model: misses when `traces`
// (request after request, step after step, MoE layers in order; each
// distinct activated expert of an offloaded layer is one lookup) run on a
// cache of `num_slabs` one-expert slabs. Layers not in `offloaded_layers`
// never miss. REQUIRES: num_slabs >= 0.
int64_t SimulateLruMisses(const std::vector<std::vector<StepRecord>>& traces,
                          const std::vector<int>& offloaded_layers, int num_slabs);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_CALIBRATOR_H_
