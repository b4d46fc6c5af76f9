// ServerOptions: the daemon's whole configuration, from defaults, an optional
// JSON config file (--config) and command-line flags, in that order of
// precedence (a flag given explicitly overrides the file).
//
// Every option has one key, used both as the flag name and as the JSON key;
// SetServerOption() is the single parser of option values.
//
// Thread safety: plain data; ServerOptionsFromFlags reads global flags.
#ifndef VISMOE_SERVER_SERVER_OPTIONS_H_
#define VISMOE_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/core/byte_size.h"  // ParseByteSize, used by flags and config

namespace vismoe::server {

struct ServerOptions {
  // ---- model and engine ----
  std::string model;  // checkpoint directory
  // Seeded random weights of model's config.json shapes instead of its
  // safetensors (EngineOptions::synthetic_weights): for load tests and
  // benchmarks only; every output is meaningless.
  bool synthetic_weights = false;
  int64_t synthetic_seed = 0;      // >= 0
  std::string synthetic_routing = "random";  // random | realistic
  std::string backend = "auto";    // auto | cpu | cuda
  int64_t gpu_memory_budget = 0;   // bytes; 0 = everything resident
  int engine_threads = 0;          // CPU kernel threads; 0 = all cores
  int max_context_tokens = 32768;  // KV cache capacity per sequence
  // ---- network ----
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9464";  // "" disables /metrics
  int64_t max_message_bytes = 64LL << 20;         // gRPC receive limit
  std::string tls_cert;                           // PEM files; both or neither
  std::string tls_key;
  // OpenAI-compatible HTTP API (server/openai_api.md): "host:port", "" = off.
  std::string http_listen;
  int http_threads = 64;  // HTTP connections served at once (one thread each)
  // A request on the HTTP API running longer ends with 504 (gRPC clients set
  // their own deadline).
  absl::Duration http_request_timeout = absl::Minutes(10);
  // The model's id on the HTTP API (/v1/models, the "model" field); "" = the
  // last component of `model`.
  std::string served_model_name;
  std::string api_key;       // "" = no authentication
  std::string api_key_file;  // alternative to api_key
  // ---- admission ----
  int max_queue = 64;          // requests waiting for a worker
  int workers = 8;             // requests the engine runs at once, batched into each step
  int max_step_tokens = 2048;  // rows of one forward step (decode tokens + prefill chunks)
  int kv_cache_tokens = 0;     // KV cache shared by all requests; 0 = max_context_tokens
  int prepare_threads = 2;     // requests prepared (images decoded, prompt built) at once
  int decode_threads = 2;      // concurrent image decodes
  absl::Duration drain_timeout = absl::Seconds(30);
  // ---- request limits ----
  int max_images = 8;
  int64_t max_image_bytes = 20LL << 20;
  int64_t max_image_pixels = 4096LL * 4096;
  int max_jpeg_scans = 64;             // scans per JPEG (each a full decoding pass)
  bool apply_exif_orientation = true;  // turn JPEGs upright by their EXIF tag
  int max_prompt_tokens = 16384;
  int64_t max_prompt_bytes = 1LL << 20;  // text bytes per request, checked before tokenizing
  int max_new_tokens_limit = 4096;
  int max_stop_strings = 16;
  // Trusted clients only: special tokens written in text parts
  // ("<|im_start|>") are recognised instead of encoded as ordinary text.
  bool allow_special_tokens_in_text = false;
  // ---- offload runtime (used when gpu_memory_budget > 0) ----
  int pinned_layers = -1;        // MoE layers in the pinned prefix; -1 = VisMMOE Eq. 10
  int64_t copy_bandwidth = 0;    // CPU backend copy engine bytes/s; 0 = unthrottled
  std::string eviction = "lru";  // lru | lfu | guarded
  int host_moe_layers = 0;       // the last N MoE layers always computed on the host

  // ---- default policies ("" / 0 = the engine's default) ----
  std::string token_compressor;
  double keep_ratio = 0;
  // Drives prefetch and guarded eviction in the slab cache:
  // none | history | router-lookahead | mlp-lookahead (needs calibration_profile).
  std::string expert_predictor = "history";
  // JSON profile written by vismoe-calibrate ("" = none): the mlp-lookahead
  // weights, router-lookahead default vectors and the Eq. 10 costs.
  std::string calibration_profile;
  // MoDES expert skipping (lossy, so off by default): none | dual-threshold.
  // Thresholds < 0 come from the calibration profile (vismoe-calibrate
  // --skip_target_rate); a request may override all three.
  std::string expert_skipping = "none";
  double skip_tau_text = -1;
  double skip_tau_visual = -1;
  // Per-sequence preload (MELINOE; engine/policy/preload.md): none |
  // prefill-routing; experts per offloaded layer (0 = the model's top-k) and
  // the slab cache's share all running sequences' preferred sets may hold.
  std::string preload = "none";
  int preload_experts = 0;
  double preload_share = 0.5;
  // Miss policy of an offloaded MoE layer: fetch (the exact path) | cpu (a
  // miss computed on the host when that is measured cheaper than its copy;
  // exact; engine/policy/host_experts.md) | commit (paper 003, lossy: an
  // uncertain token computes with experts the predictor chose that are
  // resident or in flight; needs an expert predictor). The
  // certainty threshold < 0 comes from the calibration profile (vismoe-calibrate
  // --commit_target_rate); OWA (Eq. 5-6) is on when commit_owa_alpha1 > 0, and
  // triggers for tokens keeping [min, max] of their router's experts (-1 =
  // ceil(top_k / 2) and top_k - 1). A request may override the policy, the
  // threshold and both alphas.
  std::string miss_policy = "fetch";
  // Where expert copies are read from: auto | mapped | packed
  // (engine/offload/host_store_mode.h; OffloadOptions::host_experts).
  std::string host_experts = "auto";
  // The dtype experts are kept in: auto | fp8 (quantised at load, CPU
  // backend; engine/offload/expert_dtype.h; OffloadOptions::expert_dtype).
  std::string expert_dtype = "auto";
  double commit_threshold = -1;
  double commit_owa_alpha1 = 0;
  double commit_owa_alpha2 = 1;
  int commit_owa_min_correct = -1;
  int commit_owa_max_correct = -1;
  // Speculative execution of prefetched experts (paper 004, lossy; CPU
  // backend): decode steps compute the next MoE layer's predicted experts on
  // the quasi-hidden state during copy waits and keep those the router picks.
  bool speculative_execution = false;

  // Multi-line "key = value" listing for the start-up log; the API key is
  // shown as "<set>" or "<unset>", never its value.
  std::string DebugString() const;
};

// The model id of the HTTP API: served_model_name, else the last path
// component of model.
std::string ServedModelName(const ServerOptions& options);

// All option keys, in DebugString order.
const std::vector<std::string>& ServerOptionKeys();

// Sets the option `key` from its textual value. Byte sizes accept plain
// bytes or a unit ("24GB", "512MiB", "1.5GiB"); durations use absl syntax
// ("30s", "1m"). InvalidArgument names the key and the bad value; an unknown
// key is an error.
absl::Status SetServerOption(absl::string_view key, absl::string_view value,
                             ServerOptions* options);

// Applies a JSON object of {key: value} (strings, numbers or booleans).
// `source` names the file in error messages.
absl::Status ApplyConfigJson(absl::string_view json_text, absl::string_view source,
                             ServerOptions* options);

// Cross-field checks and derived values: reads api_key_file, checks TLS
// pairs, limits and policy names.
absl::Status FinalizeServerOptions(ServerOptions* options);

// Defaults, then --config (if given), then the flags present on the command
// line; finalized. REQUIRES: absl::ParseCommandLine ran.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_SERVER_OPTIONS_H_
