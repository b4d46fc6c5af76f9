// Plain data types of the engine's public API: what a caller submits and what
// it gets back. No gRPC types here; server/ translates its protos into these.
#ifndef VISMOE_ENGINE_RUNTIME_REQUEST_H_
#define VISMOE_ENGINE_RUNTIME_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vismoe {

// A decoded image: 8-bit RGB, row-major, height * width * 3 bytes.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

// One ordered part of a chat message: text, or a reference to an image of the
// request (index into GenerateRequest::images).
struct ContentPart {
  enum class Kind { kText, kImage };
  Kind kind = Kind::kText;
  std::string text;
  int image_index = -1;
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::vector<ContentPart> content;
};

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

// Offload counters of one request (the per-request slice of StatsSink).
struct OffloadStats {
  uint64_t cache_queries = 0;
  uint64_t cache_hits = 0;
  uint64_t prefetch_needed = 0;    // activated experts outside the pinned prefix
  uint64_t prefetch_recalled = 0;  // of those, resident or in flight when needed
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;
  uint64_t bytes_h2d = 0;
  double stall_seconds = 0;
};

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
  std::string text;            // decoded completion, stop string removed
  RequestUsage usage;
  RequestTimings timings;
  OffloadStats offload;
};

// Streamed piece of output: newly complete UTF-8 text and the ids behind it.
struct TokenDelta {
  std::string text;
  std::vector<int> token_ids;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_REQUEST_H_
