// FinalizeServerOptions: the cross-field checks of ServerOptions (see
// server_options.h), apart from the parsing of single values.
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/core/dtype.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "server/listen_address.h"
#include "server/policy_names.h"
#include "server/server_options.h"

namespace vismoe::server {
namespace {

absl::Status BadValue(absl::string_view key, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("option ", key, ": invalid value \"", value, "\": ", why));
}

absl::Status RequirePositive(absl::string_view key, int64_t value) {
  if (value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("option ", key, " must be positive, got ", value));
  }
  return absl::OkStatus();
}

// gRPC's own schemes (unix:, unix-abstract:, vsock:) pass through; anything
// else is host:port.
absl::Status RequireGrpcAddress(absl::string_view key, absl::string_view value) {
  for (absl::string_view scheme : {"unix:", "unix-abstract:", "vsock:"}) {
    if (absl::StartsWith(value, scheme)) return absl::OkStatus();
  }
  return CheckHostPort(key, value);
}

// Options that start one thread each: beyond this the system runs out of
// threads (or stacks) before the server could use them.
constexpr int64_t kMaxThreads = 1024;

absl::Status RequireThreads(absl::string_view key, int64_t value, int64_t min) {
  if (value < min || value > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("option ", key, " must be in [", min, ", ",
                                                   kMaxThreads, "] (one thread each), got ",
                                                   value));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ServedModelName(const ServerOptions& o) {
  if (!o.served_model_name.empty()) return o.served_model_name;
  absl::string_view dir = absl::StripSuffix(o.model, "/");
  return std::string(dir.substr(dir.rfind('/') + 1));
}

absl::Status FinalizeServerOptions(ServerOptions* o) {
  if (o->model.empty()) return absl::InvalidArgumentError("option model: no model directory given");
  if (o->backend != "auto" && o->backend != "cpu" && o->backend != "cuda") {
    return BadValue("backend", o->backend, "expected auto, cpu or cuda");
  }
  if (o->synthetic_routing != "random" && o->synthetic_routing != "realistic") {
    return BadValue("synthetic_routing", o->synthetic_routing, "expected random or realistic");
  }
  if (o->listen.empty()) return absl::InvalidArgumentError("option listen: empty address");
  VISMOE_RETURN_IF_ERROR(RequireGrpcAddress("listen", o->listen));
  if (!o->metrics_listen.empty()) {
    VISMOE_RETURN_IF_ERROR(CheckHostPort("metrics_listen", o->metrics_listen));
  }
  if (!o->http_listen.empty()) {
    VISMOE_RETURN_IF_ERROR(CheckHostPort("http_listen", o->http_listen));
  }
  VISMOE_RETURN_IF_ERROR(RequireThreads("http_threads", o->http_threads, 1));
  o->served_model_name = ServedModelName(*o);
  if (o->gpu_memory_budget < 0) return BadValue("gpu_memory_budget", "", "must be >= 0");
  VISMOE_RETURN_IF_ERROR(RequireThreads("engine_threads", o->engine_threads, 0));
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_context_tokens", o->max_context_tokens));
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_message_bytes", o->max_message_bytes));
  if (o->max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError("option max_message_bytes must be below 2 GiB");
  }
  if (o->max_queue < 0) return absl::InvalidArgumentError("option max_queue must be >= 0");
  VISMOE_RETURN_IF_ERROR(RequireThreads("workers", o->workers, 1));
  if (o->max_step_tokens < o->workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("option max_step_tokens (", o->max_step_tokens, ") must be >= workers (",
                     o->workers, "): every running request decodes one token per step"));
  }
  if (o->kv_cache_tokens != 0 && o->kv_cache_tokens < o->max_context_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("option kv_cache_tokens (", o->kv_cache_tokens,
                                                   ") must be 0 or >= max_context_tokens (",
                                                   o->max_context_tokens, ")"));
  }
  VISMOE_RETURN_IF_ERROR(RequireThreads("prepare_threads", o->prepare_threads, 1));
  VISMOE_RETURN_IF_ERROR(RequireThreads("decode_threads", o->decode_threads, 1));
  if (o->max_images < 0) return absl::InvalidArgumentError("option max_images must be >= 0");
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_image_bytes", o->max_image_bytes));
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_image_pixels", o->max_image_pixels));
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_jpeg_scans", o->max_jpeg_scans));
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_prompt_tokens", o->max_prompt_tokens));
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_prompt_bytes", o->max_prompt_bytes));
  VISMOE_RETURN_IF_ERROR(RequirePositive("max_new_tokens_limit", o->max_new_tokens_limit));
  if (o->max_stop_strings < 0) {
    return absl::InvalidArgumentError("option max_stop_strings must be >= 0");
  }
  if (o->tls_cert.empty() != o->tls_key.empty()) {
    return absl::InvalidArgumentError("options tls_cert and tls_key must be given together");
  }
  if (!o->api_key.empty() && !o->api_key_file.empty()) {
    return absl::InvalidArgumentError("options api_key and api_key_file are mutually exclusive");
  }
  if (!o->api_key_file.empty()) {
    std::ifstream in(o->api_key_file, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("option api_key_file: cannot read ", o->api_key_file));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    o->api_key = std::string(absl::StripAsciiWhitespace(ss.str()));
    if (o->api_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("option api_key_file: ", o->api_key_file, " is empty"));
    }
  }
  if (!PolicyFromName<EvictionPolicy>(o->eviction).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("option eviction: unknown policy \"",
                                                   o->eviction, "\" (",
                                                   PolicyNames<EvictionPolicy>(", "), ")"));
  }
  if (o->host_moe_layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("option host_moe_layers must be >= 0, got ", o->host_moe_layers));
  }
  if (o->host_moe_layers > 0 && o->gpu_memory_budget == 0) {
    return absl::InvalidArgumentError(
        "option host_moe_layers needs --gpu_memory_budget: without a budget every expert is "
        "resident and none is computed on the host");
  }
  if (!o->token_compressor.empty()) {
    VISMOE_RETURN_IF_ERROR(ValidateTokenCompressorName("token_compressor", o->token_compressor));
  }
  if (!o->expert_predictor.empty()) {
    VISMOE_RETURN_IF_ERROR(ValidateExpertPredictorName("expert_predictor", o->expert_predictor));
    if (o->expert_predictor == "mlp-lookahead" && o->calibration_profile.empty()) {
      return absl::InvalidArgumentError(
          "option expert_predictor: \"mlp-lookahead\" needs a trained predictor; run "
          "vismoe-calibrate on this model and pass its profile with --calibration_profile "
          "(or choose router-lookahead or history)");
    }
  }
  if (!PolicyFromName<SkipKind>(o->expert_skipping).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("option expert_skipping: unknown policy \"",
                                                   o->expert_skipping, "\" (",
                                                   PolicyNames<SkipKind>(", "), ")"));
  }
  if (o->expert_skipping == "dual-threshold" && o->calibration_profile.empty() &&
      (o->skip_tau_text < 0 || o->skip_tau_visual < 0)) {
    return absl::InvalidArgumentError(
        "option expert_skipping: \"dual-threshold\" needs skip_tau_text and skip_tau_visual "
        "(>= 0) or a calibration_profile with calibrated thresholds (vismoe-calibrate "
        "--skip_target_rate)");
  }
  if (!PolicyFromName<PreloadKind>(o->preload).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("option preload: unknown policy \"", o->preload,
                                                   "\" (", PolicyNames<PreloadKind>(", "), ")"));
  }
  if (o->preload_experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option preload_experts must be >= 0 (0 = the model's top-k), got ", o->preload_experts));
  }
  if (!(o->preload_share > 0 && o->preload_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("option preload_share must be in (0, 1], got ", o->preload_share));
  }
  if (!PolicyFromName<MissPolicy>(o->miss_policy).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("option miss_policy: unknown policy \"",
                                                   o->miss_policy, "\" (",
                                                   PolicyNames<MissPolicy>(", "), ")"));
  }
  if (!PolicyFromName<HostStoreMode>(o->host_experts).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("option host_experts: unknown mode \"",
                                                   o->host_experts, "\" (",
                                                   PolicyNames<HostStoreMode>(", "), ")"));
  }
  if (absl::Status st = ParseExpertDType(o->expert_dtype).status(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("option ", st.message()));
  }
  if (o->miss_policy == "commit" && o->calibration_profile.empty() && o->commit_threshold < 0) {
    return absl::InvalidArgumentError(
        "option miss_policy: \"commit\" needs commit_threshold (>= 0) or a calibration_profile "
        "with a calibrated threshold (vismoe-calibrate --commit_target_rate)");
  }
  if (!(o->keep_ratio == 0 || (o->keep_ratio > 0 && o->keep_ratio <= 1))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option keep_ratio must be in (0, 1] (or 0 for the engine default), got ", o->keep_ratio));
  }
  return absl::OkStatus();
}

}  // namespace vismoe::server
