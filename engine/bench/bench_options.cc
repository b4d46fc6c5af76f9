#include "engine/bench/bench_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/byte_size.h"
#include "engine/core/dtype.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "engine/model/synthetic_routing.h"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint directory");
ABSL_FLAG(bool, synthetic_weights, false,
          "seeded random BF16 weights of --model's config.json shapes instead of its safetensors "
          "(the directory needs only config.json + tokenizer files); outputs are meaningless");
ABSL_FLAG(uint64_t, synthetic_seed, 0, "seed of --synthetic_weights");
ABSL_FLAG(std::string, synthetic_routing, "random",
          "how --synthetic_weights route: random | realistic (engine/model/synthetic_routing.h)");
ABSL_FLAG(std::string, budget, "0",
          "device memory budget in bytes (K/M/G suffix ok); 0 = all resident");
ABSL_FLAG(int, pinned_layers, -1, "MoE layers in the pinned prefix; -1 = Eq. 10");
ABSL_FLAG(std::string, copy_bandwidth, "0", "CPU copy engine bytes/s (K/M/G ok); 0 = unthrottled");
ABSL_FLAG(std::string, eviction, "lru", "lru | lfu | guarded");
ABSL_FLAG(std::string, prefetch, "none",
          "expert predictor driving prefetch: none | history | router-lookahead | mlp-lookahead");
ABSL_FLAG(int, prefetch_count, 0, "B: experts prefetched per layer; 0 = the model's top-k");
ABSL_FLAG(int, lookahead_window, 5, "W: MoE layers a lookahead predictor scores ahead");
ABSL_FLAG(std::string, preload, "none",
          "per-sequence preload (MELINOE): none | prefill-routing (after its prefill, a "
          "sequence's top experts per offloaded layer by prefill routing mass are copied in and "
          "kept for it until it ends)");
ABSL_FLAG(int, preload_experts, 0, "experts preloaded per offloaded layer; 0 = the model's top-k");
ABSL_FLAG(double, preload_share, 0.5,
          "fraction of the slab cache, in (0, 1], all running sequences' preloaded experts may "
          "hold together");
ABSL_FLAG(std::string, host_experts, "auto",
          "where expert copies are read from: mapped (the mmapped checkpoint, no second host "
          "copy) | packed (a packed copy, page-locked on CUDA) | auto (packed only where a "
          "page-locked copy fits the host's available memory with room to spare)");
ABSL_FLAG(std::string, expert_dtype, "auto",
          "the dtype routed experts are kept and copied in: auto (as stored) | fp8 (quantised at "
          "load to 128x128-block FP8; lossy; on CUDA when named; engine/offload/expert_dtype.h)");
ABSL_FLAG(std::string, miss_policy, "fetch",
          "an offloaded expert miss: fetch (copy it in, wait) | cpu (compute it on the host when "
          "the measured host time is below its copy time; engine/policy/host_experts.md) | "
          "commit (lossy, paper 003; needs --prefetch)");
ABSL_FLAG(int, host_moe_layers, 0,
          "static host placement (like llama.cpp's --n-cpu-moe): the experts of the last N MoE "
          "layers are always computed on the host, never copied; 0 = none");
ABSL_FLAG(std::string, calibration_profile, "",
          "calibration profile JSON (mlp-lookahead weights, Eq. 10 costs)");
ABSL_FLAG(std::string, token_compressor, "none", "none | random | saliency | affinity");
ABSL_FLAG(std::string, expert_skipping, "none",
          "MoDES expert skipping (lossy): none | dual-threshold");
ABSL_FLAG(double, skip_tau_text, -1,
          "expert skipping threshold of text tokens (>= 0); -1 = the calibration profile's");
ABSL_FLAG(double, skip_tau_visual, -1,
          "expert skipping threshold of visual tokens (>= 0); -1 = the calibration profile's");
ABSL_FLAG(double, commit_threshold, -1,
          "commit below this router certainty (KL to uniform, nats), >= 0; -1 = the calibration "
          "profile's");
ABSL_FLAG(double, commit_owa_alpha1, 0, "commit OWA alpha_1 (Eq. 5), >= 0; 0 = OWA off");
ABSL_FLAG(double, commit_owa_alpha2, 1, "commit OWA alpha_2 (Eq. 6), > 0");
ABSL_FLAG(int, commit_owa_min_correct, -1,
          "OWA trigger: at least this many router experts kept; -1 = ceil(k/2)");
ABSL_FLAG(int, commit_owa_max_correct, -1,
          "OWA trigger: at most this many router experts kept; -1 = k - 1");
ABSL_FLAG(bool, speculative_execution, false,
          "compute the next MoE layer's predicted experts on the quasi-hidden state during copy "
          "waits and keep them where the router agrees (lossy, paper 004; CPU backend)");
ABSL_FLAG(double, keep_ratio, 0.5,
          "keep ratio beta of --token_compressor and of the compressing --ablation rows");
ABSL_FLAG(std::string, prompt, "Describe a mixture of experts model in one sentence.",
          "prompt of a single request (ignored with --requests)");
ABSL_FLAG(std::string, image, "", "image file of the single request (ignored with --requests)");
ABSL_FLAG(std::string, requests, "", "JSONL request set");
ABSL_FLAG(int, synthetic_images, 0,
          "generated images in the single request (no image file; ignored with --requests)");
ABSL_FLAG(int, synthetic_image_size, 448, "side in pixels of each --synthetic_images image");
ABSL_FLAG(std::string, backend, "auto", "auto | cpu | cuda");
ABSL_FLAG(int, max_new_tokens, 32, "tokens to generate per request (default for --requests)");
ABSL_FLAG(int, repeat, 1, "runs of the request set; the report gives means per run");
ABSL_FLAG(int, max_context_tokens, 4096, "KV cache capacity (counts against the budget)");
ABSL_FLAG(int, threads, 0, "CPU kernel threads; 0 = all cores");
ABSL_FLAG(bool, ablation, false, "also run the VisMMOE Table 4 ablation (4 engines)");
ABSL_FLAG(std::string, ablation_predictor, "",
          "predictor of the ablation's prefetching rows; empty = router-lookahead, or "
          "mlp-lookahead with --calibration_profile");
ABSL_FLAG(bool, micro, false, "also run predictor and compressor micro benchmarks");
ABSL_FLAG(double, micro_seconds, 0.2, "minimum timed seconds per micro benchmark");
ABSL_FLAG(bool, micro_kernels, false,
          "also time the CPU matrix kernels (reference vs each fast path) on the model's shapes");
ABSL_FLAG(std::vector<std::string>, micro_kernel_dtypes,
          std::vector<std::string>({"BF16", "F16", "F32"}),
          "weight dtypes of --micro_kernels: BF16, F16, F32, F8_E4M3 (128 x 128 block scales), "
          "MXFP4 (e8m0 scales per 32); the block-scaled ones on [out, in] shapes only");
ABSL_FLAG(std::vector<std::string>, batch_sizes, {},
          "also run the batch sweep (batched decode steps on the CPU decoder) for these batch "
          "sizes, e.g. 1,4,16");
ABSL_FLAG(int, batch_prompt_tokens, 32, "prompt tokens of each batch sweep sequence");
ABSL_FLAG(int, batch_decode_steps, 16, "decode steps of each batch sweep run");
ABSL_FLAG(std::vector<std::string>, concurrency, {},
          "also run the concurrency sweep on the loaded engine and its backend: the (first) "
          "request from this many streams at once, e.g. 1,8 (batched decode through the engine; "
          "at most 8 run together)");
ABSL_FLAG(bool, concurrency_same_prompt, false,
          "the concurrency sweep's streams all send the same prompt (default: each prefixed "
          "with its stream number)");
ABSL_FLAG(bool, routing_stats, false,
          "also run the request set once more and report the model's routing statistics "
          "(next-token repeat, reuse distance, LRU and Belady hit ratios: routing_stats_run.h)");
ABSL_FLAG(double, routing_stats_temperature, 1.0,
          "sampling temperature of the --routing_stats run (seeded per request)");
ABSL_FLAG(std::string, json_out, "", "also write the report here");
ABSL_FLAG(bool, device_op_timing, false,
          "time each op family of every step with device events (CUDA): the report's "
          "device_op_timing and a table on stderr");

namespace vismoe::bench {
namespace {

absl::Status CheckOneOf(const char* flag, const std::string& value,
                        std::initializer_list<const char*> allowed) {
  for (const char* a : allowed) {
    if (value == a) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": expected one of ", absl::StrJoin(allowed, " | ")));
}

// --flag=value naming one kind of the policy table.
template <typename Kind>
absl::Status CheckPolicy(const char* flag, const std::string& value) {
  if (PolicyFromName<Kind>(value).has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": expected one of ", PolicyNames<Kind>(" | ")));
}

}  // namespace

bool ParseBytes(const std::string& s, double* out) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(s);
  if (!bytes.ok()) return false;
  *out = static_cast<double>(*bytes);
  return true;
}

absl::StatusOr<BenchOptions> BenchOptionsFromFlags() {
  BenchOptions b;
  EngineOptions& e = b.engine;
  e.model_path = absl::GetFlag(FLAGS_model);
  if (e.model_path.empty()) return absl::InvalidArgumentError("--model is required");
  e.synthetic_weights = absl::GetFlag(FLAGS_synthetic_weights);
  e.synthetic_seed = absl::GetFlag(FLAGS_synthetic_seed);
  e.synthetic_routing = absl::GetFlag(FLAGS_synthetic_routing);
  if (const auto routing = ParseSyntheticRouting(e.synthetic_routing); !routing.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic_routing: ", routing.status().message()));
  }
  e.num_threads = absl::GetFlag(FLAGS_threads);
  e.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
  e.device_op_timing = absl::GetFlag(FLAGS_device_op_timing);
  double budget = 0;
  if (!ParseBytes(absl::GetFlag(FLAGS_budget), &budget)) {
    return absl::InvalidArgumentError(absl::StrCat("--budget=", absl::GetFlag(FLAGS_budget),
                                                   ": expected bytes with an optional K/M/G/T"));
  }
  if (!ParseBytes(absl::GetFlag(FLAGS_copy_bandwidth), &b.copy_bandwidth_limit)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--copy_bandwidth=", absl::GetFlag(FLAGS_copy_bandwidth),
                     ": expected bytes/s with an optional K/M/G/T"));
  }
  e.gpu_memory_budget_bytes = static_cast<int64_t>(budget);
  OffloadOptions& o = e.offload;
  o.pinned_layers = absl::GetFlag(FLAGS_pinned_layers);
  o.copy_bandwidth_bytes_per_s = b.copy_bandwidth_limit;
  o.eviction = absl::GetFlag(FLAGS_eviction);
  VISMOE_RETURN_IF_ERROR(CheckPolicy<EvictionPolicy>("eviction", o.eviction));
  o.prefetch = absl::GetFlag(FLAGS_prefetch);
  VISMOE_RETURN_IF_ERROR(CheckPolicy<PredictorKind>("prefetch", o.prefetch));
  o.prefetch_count = absl::GetFlag(FLAGS_prefetch_count);
  if (o.prefetch_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefetch_count=", o.prefetch_count, ": must be >= 0"));
  }
  o.lookahead_window = absl::GetFlag(FLAGS_lookahead_window);
  if (o.lookahead_window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lookahead_window=", o.lookahead_window, ": must be >= 1"));
  }
  o.host_experts = absl::GetFlag(FLAGS_host_experts);
  VISMOE_RETURN_IF_ERROR(CheckPolicy<HostStoreMode>("host_experts", o.host_experts));
  o.expert_dtype = absl::GetFlag(FLAGS_expert_dtype);
  if (absl::Status st = ParseExpertDType(o.expert_dtype).status(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", st.message()));
  }
  o.preload = absl::GetFlag(FLAGS_preload);
  VISMOE_RETURN_IF_ERROR(CheckPolicy<PreloadKind>("preload", o.preload));
  o.preload_experts = absl::GetFlag(FLAGS_preload_experts);
  if (o.preload_experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--preload_experts=", o.preload_experts,
                                                   ": must be >= 0 (0 = the model's top-k)"));
  }
  o.preload_share = absl::GetFlag(FLAGS_preload_share);
  if (!(o.preload_share > 0 && o.preload_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--preload_share=", o.preload_share, ": must be in (0, 1]"));
  }
  o.miss_policy = absl::GetFlag(FLAGS_miss_policy);
  VISMOE_RETURN_IF_ERROR(CheckPolicy<MissPolicy>("miss_policy", o.miss_policy));
  o.host_moe_layers = absl::GetFlag(FLAGS_host_moe_layers);
  if (o.host_moe_layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host_moe_layers=", o.host_moe_layers, ": must be >= 0"));
  }
  e.calibration_profile = absl::GetFlag(FLAGS_calibration_profile);
  e.compression.kind = absl::GetFlag(FLAGS_token_compressor);
  VISMOE_RETURN_IF_ERROR(CheckPolicy<CompressorKind>("token_compressor", e.compression.kind));
  b.keep_ratio = absl::GetFlag(FLAGS_keep_ratio);
  if (!(b.keep_ratio > 0 && b.keep_ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--keep_ratio=", b.keep_ratio, ": must be in (0, 1]"));
  }
  e.compression.beta = b.keep_ratio;
  // Algorithm 1 needs alpha <= beta; keep the default 0.1 unless beta is smaller.
  e.compression.alpha = std::min(e.compression.alpha, b.keep_ratio);

  e.skipping.kind = absl::GetFlag(FLAGS_expert_skipping);
  VISMOE_RETURN_IF_ERROR(CheckPolicy<SkipKind>("expert_skipping", e.skipping.kind));
  for (const auto& [name, value, out] :
       {std::tuple{"skip_tau_text", absl::GetFlag(FLAGS_skip_tau_text), &e.skipping.tau_text},
        std::tuple{"skip_tau_visual", absl::GetFlag(FLAGS_skip_tau_visual),
                   &e.skipping.tau_visual}}) {
    if (!std::isfinite(value) || (value < 0 && value != -1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, "=", value, ": must be >= 0, or -1 for the calibration profile's"));
    }
    *out = static_cast<float>(value);
  }

  const double threshold = absl::GetFlag(FLAGS_commit_threshold);
  if (!std::isfinite(threshold) || (threshold < 0 && threshold != -1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--commit_threshold=", threshold, ": must be >= 0, or -1 for the calibration profile's"));
  }
  e.commit.threshold = static_cast<float>(threshold);
  e.commit.owa_alpha1 = static_cast<float>(absl::GetFlag(FLAGS_commit_owa_alpha1));
  e.commit.owa_alpha2 = static_cast<float>(absl::GetFlag(FLAGS_commit_owa_alpha2));
  e.commit.owa_min_correct = absl::GetFlag(FLAGS_commit_owa_min_correct);
  e.commit.owa_max_correct = absl::GetFlag(FLAGS_commit_owa_max_correct);
  {
    const CommitOptionNames names{"--miss_policy", "--commit_threshold", "--commit_owa_alpha1",
                                  "--commit_owa_alpha2"};
    VISMOE_RETURN_IF_ERROR(CheckCommitMissOptions(o.miss_policy, e.commit, names));
  }
  e.speculative_execution = absl::GetFlag(FLAGS_speculative_execution);

  b.requests_path = absl::GetFlag(FLAGS_requests);
  b.prompt = absl::GetFlag(FLAGS_prompt);
  b.image_path = absl::GetFlag(FLAGS_image);
  b.synthetic_images = absl::GetFlag(FLAGS_synthetic_images);
  b.synthetic_image_size = absl::GetFlag(FLAGS_synthetic_image_size);
  if (b.synthetic_images < 0 || b.synthetic_images > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic_images=", b.synthetic_images, ": must be in [0, 64]"));
  }
  if (b.synthetic_image_size < 32 || b.synthetic_image_size > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic_image_size=", b.synthetic_image_size, ": must be in [32, 4096]"));
  }
  e.backend = absl::GetFlag(FLAGS_backend);
  VISMOE_RETURN_IF_ERROR(CheckOneOf("backend", e.backend, {"auto", "cpu", "cuda"}));
  b.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  if (b.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_new_tokens=", b.max_new_tokens, ": must be >= 1"));
  }
  b.repeat = absl::GetFlag(FLAGS_repeat);
  if (b.repeat < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--repeat=", b.repeat, ": must be >= 1"));
  }

  b.ablation = absl::GetFlag(FLAGS_ablation);
  b.ablation_predictor = absl::GetFlag(FLAGS_ablation_predictor);
  if (b.ablation_predictor.empty()) {
    b.ablation_predictor = e.calibration_profile.empty() ? "router-lookahead" : "mlp-lookahead";
  }
  VISMOE_RETURN_IF_ERROR(CheckOneOf("ablation_predictor", b.ablation_predictor,
                                    {"history", "router-lookahead", "mlp-lookahead"}));
  if (b.ablation && e.gpu_memory_budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        "--ablation needs --budget > 0: prefetch and eviction act only on the offload runtime");
  }

  for (const std::string& v : absl::GetFlag(FLAGS_batch_sizes)) {
    int n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--batch_sizes: '", v, "' is not a batch size (an integer >= 1)"));
    }
    b.batch_sizes.push_back(n);
  }
  for (const std::string& v : absl::GetFlag(FLAGS_concurrency)) {
    int n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 1 || n > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("--concurrency: '", v, "' is not a stream count (an integer in [1, 256])"));
    }
    b.concurrency.push_back(n);
  }
  b.concurrency_same_prompt = absl::GetFlag(FLAGS_concurrency_same_prompt);
  b.routing_stats = absl::GetFlag(FLAGS_routing_stats);
  b.routing_stats_temperature = absl::GetFlag(FLAGS_routing_stats_temperature);
  if (!(b.routing_stats_temperature >= 0) || b.routing_stats_temperature > 100) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--routing_stats_temperature=", b.routing_stats_temperature, ": must be in [0, 100]"));
  }
  b.batch_prompt_tokens = absl::GetFlag(FLAGS_batch_prompt_tokens);
  b.batch_decode_steps = absl::GetFlag(FLAGS_batch_decode_steps);
  if (b.batch_prompt_tokens < 1 || b.batch_decode_steps < 1) {
    return absl::InvalidArgumentError(
        "--batch_prompt_tokens and --batch_decode_steps must be >= 1");
  }
  b.micro = absl::GetFlag(FLAGS_micro);
  b.micro_seconds = absl::GetFlag(FLAGS_micro_seconds);
  b.micro_kernels = absl::GetFlag(FLAGS_micro_kernels);
  b.micro_kernel_dtypes = absl::GetFlag(FLAGS_micro_kernel_dtypes);
  for (const std::string& d : b.micro_kernel_dtypes) {
    if (d != "BF16" && d != "F16" && d != "F32" && d != "F8_E4M3" && d != "MXFP4") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--micro_kernel_dtypes: '", d, "' is not one of BF16, F16, F32, F8_E4M3, MXFP4"));
    }
  }
  if (!(b.micro_seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--micro_seconds=", b.micro_seconds, ": must be > 0"));
  }
  b.json_out = absl::GetFlag(FLAGS_json_out);
  return b;
}

}  // namespace vismoe::bench
