// CalibrationProfile: what `vismoe-calibrate` learns offline and the server
// loads at start-up (VisMMOE 3.3-3.4): the trained mlp-lookahead predictor,
// the router-lookahead default vectors d_l (paper 004, section 3.2), the Eq. 10
// prefix-depth costs with the L_pinned chosen for a budget, and the held-out
// Hot Recall@B of every predictor (for the record).
//
// On disk: a JSON file (readable metadata, numbers, and the name of its
// tensor file) plus a safetensors file beside it with the F32 tensors
// ("mlp.*" as MlpLookahead::Save writes them, "router_lookahead.default_vectors"
// [num_layers, hidden]). Load validates everything and names the field at fault.
// JSON layout: {"format": "vismoe-calibration-profile", "version": 1,
// "tensor_file": "<name>.safetensors" (relative to the JSON's directory),
// "model": {model_type, num_layers, num_experts, hidden_size, has_vision},
// "predictor": {window, gamma, prefetch_count}, "pinned": {l_semantic, cost,
// budget_bytes, chosen_pinned_layers}, "mlp": {present, bn_eps, ...},
// "router_lookahead": {default_vectors: bool}, "hot_recall": {name: value},
// since version 2 optionally "expert_skipping": {alpha: [num_layers numbers],
// tau_text, tau_visual, target_skip_rate, skip_rate, kl}}. Version 1 files
// (no expert_skipping) still load. Optionally "commit_miss": {threshold,
// target_rate, uncertain_rate, tokens} (paper 003's certainty threshold; a
// reader that predates it ignores it, so the version stays 2).
// The MLP shares the profile's tensor file (MlpLookahead::Tensors/FromFile).
// Thread safety: plain value.
#ifndef VISMOE_ENGINE_POLICY_CALIBRATION_PROFILE_H_
#define VISMOE_ENGINE_POLICY_CALIBRATION_PROFILE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/expert_skipping.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "engine/policy/mlp_lookahead.h"

namespace vismoe {

// MoDES expert skipping (paper 001) as vismoe-calibrate found it: GMLG's
// alpha(l) and the frontier search's thresholds for a target skip rate.
struct SkipCalibration {
  // alpha(l) per decoder layer: mean KL(prob || prob with layer l's experts
  // skipped) over the calibration set; 0 for dense layers.
  std::vector<float> alpha;
  float tau_text = 0.0f;
  float tau_visual = 0.0f;
  double target_skip_rate = 0;  // rho the search met
  double skip_rate = 0;         // measured on the calibration set at the thresholds
  double kl = 0;                // mean KL to the unskipped model there
};

// The commit miss policy's (paper 003) certainty threshold as vismoe-calibrate
// found it: the target_rate quantile of the router certainty (KL to uniform,
// nats) of the calibration set's decode tokens at MoE layers.
struct CommitCalibration {
  float threshold = 0.0f;     // a decode token commits below it
  double target_rate = 0;     // the share of decode (token, MoE layer) pairs asked to fall below
  double uncertain_rate = 0;  // the share measured there
  int64_t tokens = 0;         // decode (token, MoE layer) pairs measured
};

struct CalibrationProfile {
  // The model it was calibrated on (checked against the served one).
  std::string model_type;
  int num_layers = 0;   // decoder layers
  int num_experts = 0;  // per MoE layer
  int hidden_size = 0;
  bool has_vision = false;

  // Predictor settings it was trained / evaluated with (Eq. 9, Hot Recall@B).
  int window = 5;
  float gamma = 0.8f;
  int prefetch_count = 20;  // B

  // Eq. 10: costs per prefix depth, and the depth chosen for budget_bytes.
  PinnedPrefixProfile pinned;
  int64_t budget_bytes = 0;
  int chosen_pinned_layers = -1;

  // Trained mlp-lookahead (absent when too few samples were recorded).
  std::optional<MlpLookahead> mlp;
  // Router-lookahead d_l: mean MoE output per decoder layer, [num_layers *
  // hidden_size] (rows of dense layers are zero); empty = no default vectors.
  std::vector<float> default_vectors;

  // Held-out Hot Recall@B per predictor name ("random", "history",
  // "router-lookahead", "mlp-lookahead"), for reports.
  std::map<std::string, double> hot_recall;

  // Expert skipping's calibration; absent when not calibrated (version 1).
  std::optional<SkipCalibration> expert_skipping;
  // The commit miss policy's threshold; absent when not calibrated.
  std::optional<CommitCalibration> commit_miss;

  // Writes `json_path` and its tensor file (json_path with ".json" replaced
  // by ".safetensors", or with ".safetensors" appended).
  absl::Status Save(const std::string& json_path) const;
  // NotFound / InvalidArgument naming the file and field. With `served`, the
  // profile's model fields are checked against it (CheckMatches) before any
  // other field, so a profile made for another model is reported as that
  // and not as the first field its model makes out of range.
  static absl::StatusOr<CalibrationProfile> Load(const std::string& json_path,
                                                 const ModelConfig* served = nullptr);
  // FailedPrecondition naming the first field that differs from `config`.
  absl::Status CheckMatches(const ModelConfig& config) const;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_CALIBRATION_PROFILE_H_
