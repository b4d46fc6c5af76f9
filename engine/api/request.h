// Plain data types of the engine's public API: what a caller submits and what
// it gets back. No gRPC types here; server/ translates its protos into these.
#ifndef VISMOE_ENGINE_API_REQUEST_H_
#define VISMOE_ENGINE_API_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/commit_miss_policy.h"
#include "engine/core/expert_skipping.h"
#include "engine/core/speculative_execution.h"
#include "engine/model/chat_message.h"
#include "engine/model/rgb_image.h"
#include "engine/offload/offload_stats.h"

namespace vismoe {

struct SamplingParams {
  int max_new_tokens = 128;
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop strings (not included in the output)
};

// Per-request overrides of the server's default policies. Unset = default.
struct PolicyOverrides {
  std::optional<std::string> token_compressor;  // none|random|saliency|affinity
  std::optional<float> keep_ratio;              // beta, in (0, 1]
  std::optional<std::string> expert_predictor;  // none|history|router-lookahead|mlp-lookahead
  std::optional<std::string> expert_skipping;   // none|dual-threshold (MoDES)
  std::optional<float> skip_tau_text;           // >= 0; unset = engine's, else profile's
  std::optional<float> skip_tau_visual;         // >= 0; unset = engine's, else profile's
  std::optional<std::string> miss_policy;       // fetch|commit|cpu (commit: paper 003)
  std::optional<float> commit_threshold;        // >= 0; unset = engine's, else profile's
  std::optional<float> commit_owa_alpha1;       // >= 0, 0 = OWA off; unset = engine's
  std::optional<float> commit_owa_alpha2;       // > 0; unset = engine's
};

struct GenerateRequest {
  std::string request_id;
  std::vector<ChatMessage> messages;
  std::vector<RgbImage> images;
  SamplingParams sampling;
  PolicyOverrides policy;
  bool add_generation_prompt = true;
  // false: special/added tokens written in text parts ("<|im_start|>") are
  // encoded as ordinary text, so text cannot forge chat turns or image pads.
  // true (trusted callers only): they are recognised as tokens.
  bool allow_special_tokens_in_text = false;
};

enum class FinishReason { kEos, kLength, kStopString, kCancelled };
const char* FinishReasonName(FinishReason r);

struct RequestUsage {
  int prompt_tokens = 0;
  int visual_tokens_before = 0;  // visual tokens the vision tower produced
  int visual_tokens_after = 0;   // after token compression
  int completion_tokens = 0;
};

struct RequestTimings {
  double ttft_seconds = 0;  // from Generate() start to first token
  double tpot_seconds = 0;  // mean time per output token after the first
  double total_seconds = 0;
};

struct GenerateResult {
  FinishReason finish_reason = FinishReason::kEos;
  std::vector<int> token_ids;  // completion ids (no prompt)
  std::string text;            // decoded completion (the answer), stop string removed
  // A reasoning model's reasoning, apart from the answer (GPT-OSS's harmony
  // "analysis" channel); empty for other models.
  std::string reasoning;
  RequestUsage usage;
  RequestTimings timings;
  OffloadStats offload;
  // Expert skipping's counts for this request (all zero when it is off).
  ExpertSkipCounts expert_skipping;
  // The commit miss policy's counts for this request (all zero when it fetches).
  CommitCounts commit;
  // Speculative execution's counts and times for this request (zero when off).
  SpeculativeCounts speculative;
};

// Streamed piece of output: newly complete UTF-8 text and the ids behind it.
struct TokenDelta {
  std::string text;       // of the answer
  std::string reasoning;  // of the reasoning (GenerateResult::reasoning)
  std::vector<int> token_ids;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_API_REQUEST_H_
