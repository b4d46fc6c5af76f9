// Engine: the public API of engine/ (with engine/api/request.h and
// engine/api/stats_sink.h, the only engine headers the server includes).
// Loads one model and runs requests on it.
//
// Thread safety: Prepare() and Generate() may be called from several threads.
// Prepare runs concurrently on the calling threads; concurrent Generate calls
// are batched: the engine's step thread runs up to max_running_sequences of
// them in each forward step (continuous batching, engine/runtime/), and each
// Generate call blocks until its request has finished.
// Ownership: the engine owns its model, weights (mmapped or synthetic), device memory plan
// and thread pool. The StatsSink in the options is not owned and must outlive
// the engine.
#ifndef VISMOE_ENGINE_API_ENGINE_H_
#define VISMOE_ENGINE_API_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/api/request.h"
#include "engine/api/stats_sink.h"
#include "engine/core/routing.h"
#include "engine/offload/offload_options.h"
#include "engine/policy/commit_miss_options.h"
#include "engine/policy/expert_skipping_options.h"
#include "engine/policy/token_compressor_options.h"

namespace vismoe {

struct EngineOptions {
  std::string model_path;        // Hugging Face checkpoint directory
  std::string backend = "auto";  // auto | cpu | cuda
  int num_threads = 0;           // CPU kernel threads; 0 = all cores
  // Device memory budget for the offload runtime; 0 = everything resident.
  int64_t gpu_memory_budget_bytes = 0;
  OffloadOptions offload;  // used when gpu_memory_budget_bytes > 0
  // Default token compression (VisMMOE 3.2; PolicyOverrides may change kind
  // and beta per request). "none" keeps the exact path.
  TokenCompressorOptions compression;
  // MoE layers whose routing the affinity compressor sees (compression runs
  // after them) when there is no offload plan; with one, its L_pinned is used.
  // -1 = about a fifth of the MoE layers (the paper pins 10 of Qwen3-VL's 48), at least 1.
  int compression_pinned_layers = -1;
  // Default MoDES expert skipping (paper 001; PolicyOverrides may change it
  // per request). "none" keeps the exact path; thresholds < 0 come from the
  // calibration profile, as does alpha(l).
  ExpertSkippingOptions skipping;
  // The commit miss policy's settings, used when offload.miss_policy (or a
  // request's policy.miss_policy) is "commit" (paper 003, lossy).
  CommitMissOptions commit;
  // Speculative execution of prefetched experts (paper 004, section 4;
  // lossy): decode steps compute the next MoE layer's predicted experts on
  // the quasi-hidden state while a layer waits on a copy, and keep an output
  // where the router agrees. CPU backend only (refused elsewhere). The
  // calibration profile's default vectors build the predicted input (zero
  // without a profile). engine/policy/speculative_execution.md.
  bool speculative_execution = false;
  // Calibration profile written by vismoe-calibrate (JSON path); empty = none.
  // Supplies the mlp-lookahead weights, router-lookahead default vectors and,
  // with offload.pinned_layers == -1, the Eq. 10 costs that pick L_pinned.
  std::string calibration_profile;
  int max_context_tokens = 32768;  // KV cache capacity per sequence
  // Continuous batching: sequences in one forward step, and the rows of a step
  // (every running sequence's decode token plus chunks of prompts being
  // prefilled). A prompt with token compression is prefilled in one step.
  int max_running_sequences = 8;
  int max_step_tokens = 2048;
  // Tokens of KV cache shared by all sequences: one pool allocated at
  // start-up (the memory plan's KV region), handed out in 16-token blocks. A
  // sequence is admitted when the blocks of its prompt are free, grows a block
  // at a time while it decodes, and when no block is free the youngest running
  // sequence is preempted (its blocks freed, its tokens recomputed when it runs
  // again; on the exact path its output is unchanged; a lossy decode policy
  // -- commit, speculative execution -- acts on decode steps only, so a
  // preempted sequence's recomputed tokens run without it and later tokens
  // may differ from an uninterrupted run). 0 = max_context_tokens (room for one
  // full-length sequence). Counts against the memory budget.
  int64_t kv_cache_tokens = 0;
  StatsSink* stats = nullptr;  // not owned; null = drop stats
  // A device backend times each op family of every forward step with device
  // events and reports it to `stats` (StatsSink::OnDeviceStep): profiling;
  // the events cost the host a little time per op.
  bool device_op_timing = false;
  // Seeded random BF16 weights of the config's exact shapes instead of the
  // safetensors (engine/model/synthetic_weights.h): model_path then needs only
  // config.json, the tokenizer files, generation_config.json and (with vision)
  // preprocessor_config.json. Outputs are meaningless; bytes moved and kernels
  // run are those of the real model.
  bool synthetic_weights = false;
  uint64_t synthetic_seed = 0;
  // How they route (engine/model/synthetic_routing.h): "random" (nearly every
  // token to the same experts) or "realistic" (each token's experts partly
  // shared with its recent neighbours, like a real model's decode).
  std::string synthetic_routing = "random";
};

struct ModelInfo {
  std::string model_type;
  std::string model_path;
  std::string backend;
  int num_layers = 0;
  int num_experts = 0;
  int experts_per_token = 0;
  int hidden_size = 0;
  int vocab_size = 0;
  int max_context_tokens = 0;
  bool has_vision = false;
  // The memory plan, when experts run behind the offload runtime (a budget,
  // or experts quantised at load); all 0 when every expert is resident.
  int64_t slab_bytes = 0;  // one routed expert as slabs, copies and the host store hold it
  int num_slabs = 0;
  int pinned_layers = 0;
};

// The callbacks run on the engine's step thread, between forward steps,
// one request after another: they must return quickly and must not call
// into the engine.
struct GenerateCallbacks {
  // Called with each piece of complete UTF-8 text as it is produced; return
  // false to cancel the request (finish reason kCancelled).
  std::function<bool(const TokenDelta&)> on_delta;
  // Polled before each forward step (and between prefill layers when the
  // request runs alone); true cancels.
  std::function<bool()> is_cancelled;
  // Optional extra observer of every forward step of this request (routing,
  // residuals, MoE outputs, visual summary), after the engine's own expert
  // predictor; vismoe-calibrate records traces with it. Not owned.
  RouterObserver* router_observer = nullptr;
  // Tools only (vismoe-calibrate's GMLG and frontier search): when set,
  // replaces the request's expert skipping with this rule. Not owned.
  const ExpertSkipping* expert_skipping = nullptr;
  // Tools only: called with the prefill's last-row logits [vocab] (the
  // distribution of the first generated token) before it is sampled.
  std::function<void(absl::Span<const float>)> on_prefill_logits;
};

// A request after the host work that precedes the model: checked, its chat
// template rendered and tokenized, its images preprocessed into patches and
// its positions computed. Engine::Prepare makes it; the server's admission
// check reads prompt_tokens() and Engine::Generate runs it, so that work is
// done once per request. Immutable; owned by the caller.
class PreparedRequest {
 public:
  virtual ~PreparedRequest() = default;
  // The request as submitted, without its decoded images (the patches hold
  // them now).
  const GenerateRequest& request() const { return request_; }
  // Prompt length in tokens, visual placeholders expanded.
  int prompt_tokens() const { return prompt_tokens_; }
  // Wall time Prepare took; counted into the request's TTFT and total time.
  double prepare_seconds() const { return prepare_seconds_; }

 protected:
  PreparedRequest(GenerateRequest request, int prompt_tokens, double prepare_seconds)
      : request_(std::move(request)),
        prompt_tokens_(prompt_tokens),
        prepare_seconds_(prepare_seconds) {}

 private:
  GenerateRequest request_;
  int prompt_tokens_;
  double prepare_seconds_;
};

class Engine {
 public:
  // Loads the checkpoint at options.model_path. Any problem with the files or
  // options comes back as a Status naming the file and field.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const ModelInfo& info() const = 0;

  // Checks, formats, tokenizes and preprocesses a request without running
  // the model. InvalidArgument (naming the field) for a bad request or policy,
  // or a prompt that does not fit the context.
  virtual absl::StatusOr<std::unique_ptr<PreparedRequest>> Prepare(
      const GenerateRequest& request) = 0;

  // Runs a prepared request to completion, batched with the other running
  // requests, streaming deltas; blocks the calling thread until it ends. A
  // cancelled request returns OK with finish_reason kCancelled and the tokens
  // produced so far; a request whose KV need exceeds kv_cache_tokens is
  // InvalidArgument.
  // REQUIRES: `prepared` came from this engine's Prepare.
  virtual absl::StatusOr<GenerateResult> Generate(const PreparedRequest& prepared,
                                                  const GenerateCallbacks& callbacks) = 0;

  // Prepare, then Generate.
  absl::StatusOr<GenerateResult> Generate(const GenerateRequest& request,
                                          const GenerateCallbacks& callbacks) {
    absl::StatusOr<std::unique_ptr<PreparedRequest>> prepared = Prepare(request);
    if (!prepared.ok()) return prepared.status();
    return Generate(**prepared, callbacks);
  }
  // Prepare(request)'s prompt_tokens().
  absl::StatusOr<int> CountPromptTokens(const GenerateRequest& request) {
    absl::StatusOr<std::unique_ptr<PreparedRequest>> prepared = Prepare(request);
    if (!prepared.ok()) return prepared.status();
    return (*prepared)->prompt_tokens();
  }
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_API_ENGINE_H_
