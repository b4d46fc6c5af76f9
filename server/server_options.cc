#include "server/server_options.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "engine/core/commit_miss_policy.h"  // kMaxOwaAlpha
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "server/listen_address.h"
#include "server/policy_names.h"

#ifndef VISMOE_DEFAULT_MODEL_DIR
#define VISMOE_DEFAULT_MODEL_DIR ""
#endif

namespace {
const vismoe::server::ServerOptions kDefaults;
}  // namespace

// Flag names equal the JSON config keys. Defaults come from ServerOptions.
ABSL_FLAG(std::string, config, "", "JSON file of {option: value}; explicit flags override it");
ABSL_FLAG(std::string, model, VISMOE_DEFAULT_MODEL_DIR, "Checkpoint directory to serve");
ABSL_FLAG(bool, synthetic_weights, kDefaults.synthetic_weights,
          "Random BF16 weights of the config's shapes instead of the safetensors (the model "
          "directory needs only config.json + tokenizer files); outputs are MEANINGLESS");
ABSL_FLAG(int64_t, synthetic_seed, kDefaults.synthetic_seed, "Seed of --synthetic_weights");
ABSL_FLAG(std::string, synthetic_routing, kDefaults.synthetic_routing,
          "How --synthetic_weights route: random (nearly every token to the same experts) | "
          "realistic (like a real model's decode: engine/model/synthetic_routing.md)");
ABSL_FLAG(std::string, backend, kDefaults.backend, "Compute backend: auto | cpu | cuda");
ABSL_FLAG(std::string, gpu_memory_budget, "0",
          "Device memory budget: bytes or with a unit (24GB, 512MiB); 0 = all resident");
ABSL_FLAG(int, engine_threads, kDefaults.engine_threads, "CPU kernel threads; 0 = all cores");
ABSL_FLAG(int, max_context_tokens, kDefaults.max_context_tokens,
          "KV cache capacity per sequence, in tokens");
ABSL_FLAG(std::string, listen, kDefaults.listen, "gRPC listen address host:port");
ABSL_FLAG(std::string, metrics_listen, kDefaults.metrics_listen,
          "Prometheus /metrics address host:port; empty disables");
ABSL_FLAG(std::string, max_message_bytes, absl::StrCat(kDefaults.max_message_bytes),
          "Largest gRPC request accepted (bytes or with a unit)");
ABSL_FLAG(std::string, http_listen, kDefaults.http_listen,
          "OpenAI-compatible HTTP API (POST /v1/chat/completions, GET /v1/models, GET /health) "
          "on host:port; empty = off");
ABSL_FLAG(int, http_threads, kDefaults.http_threads,
          "HTTP connections served at once (one thread each; idle ones are dropped after 2 s)");
ABSL_FLAG(absl::Duration, http_request_timeout, kDefaults.http_request_timeout,
          "An HTTP API request running longer ends with 504");
ABSL_FLAG(std::string, served_model_name, kDefaults.served_model_name,
          "The model id of the HTTP API; empty = the last component of --model");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain (enables TLS with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, api_key, "",
          "Require 'authorization: Bearer <key>' or 'x-api-key: <key>' on every call");
ABSL_FLAG(std::string, api_key_file, "", "File holding the API key (alternative to --api_key)");
ABSL_FLAG(int, max_queue, kDefaults.max_queue,
          "Requests waiting for a worker; beyond it calls get RESOURCE_EXHAUSTED");
ABSL_FLAG(int, workers, kDefaults.workers,
          "Requests the engine runs at once, batched into each forward step");
ABSL_FLAG(int, max_step_tokens, kDefaults.max_step_tokens,
          "Rows of one forward step: every running request's decode token plus chunks of "
          "prompts being prefilled (>= --workers)");
ABSL_FLAG(int, kv_cache_tokens, kDefaults.kv_cache_tokens,
          "KV cache tokens shared by all running requests, in 16-token blocks (a request takes "
          "its prompt's blocks when admitted and grows a block at a time; the youngest is "
          "preempted and recomputed when the pool runs out); 0 = --max_context_tokens");
ABSL_FLAG(int, prepare_threads, kDefaults.prepare_threads,
          "Requests prepared (images decoded, prompt tokenized) at once, off the engine's workers");
ABSL_FLAG(int, decode_threads, kDefaults.decode_threads, "Concurrent image decodes");
ABSL_FLAG(absl::Duration, drain_timeout, kDefaults.drain_timeout,
          "On shutdown, how long in-flight requests may finish before being cancelled");
ABSL_FLAG(int, max_images, kDefaults.max_images, "Images per request");
ABSL_FLAG(std::string, max_image_bytes, absl::StrCat(kDefaults.max_image_bytes),
          "Encoded bytes per image (bytes or with a unit)");
ABSL_FLAG(int64_t, max_image_pixels, kDefaults.max_image_pixels,
          "width*height per image, checked from the header before decoding");
ABSL_FLAG(int, max_jpeg_scans, kDefaults.max_jpeg_scans,
          "Scans per JPEG, checked before decoding: each scan is a full pass over the image, so "
          "a file repeating a tiny scan thousands of times would hold a decoder for seconds");
ABSL_FLAG(bool, apply_exif_orientation, kDefaults.apply_exif_orientation,
          "Rotate/flip JPEGs by their EXIF orientation tag, as transformers' load_image does");
ABSL_FLAG(int, max_prompt_tokens, kDefaults.max_prompt_tokens,
          "Prompt tokens per request (visual tokens included)");
ABSL_FLAG(std::string, max_prompt_bytes, absl::StrCat(kDefaults.max_prompt_bytes),
          "Bytes of text per request (all text parts), checked before tokenizing (units ok)");
ABSL_FLAG(int, max_new_tokens_limit, kDefaults.max_new_tokens_limit,
          "Largest max_new_tokens a request may ask for");
ABSL_FLAG(int, max_stop_strings, kDefaults.max_stop_strings, "Stop strings per request");
ABSL_FLAG(bool, allow_special_tokens_in_text, kDefaults.allow_special_tokens_in_text,
          "Trusted clients only: special tokens written in text parts (<|im_start|>, "
          "<|image_pad|>) act as tokens; off = they are encoded as ordinary text");
ABSL_FLAG(int, pinned_layers, kDefaults.pinned_layers,
          "MoE layers whose experts are all pinned on the device; -1 = VisMMOE Eq. 10");
ABSL_FLAG(std::string, copy_bandwidth, "0",
          "CPU backend: host->device copy rate in bytes/s (units ok, e.g. 25GB); 0 = unthrottled");
ABSL_FLAG(std::string, eviction, kDefaults.eviction, "Slab cache eviction: lru | lfu | guarded");
ABSL_FLAG(int, host_moe_layers, kDefaults.host_moe_layers,
          "Static host placement (like llama.cpp's --n-cpu-moe): the experts of the last N MoE "
          "layers are always computed on the host, never copied; 0 = none");
ABSL_FLAG(std::string, token_compressor, "",
          "Default token compressor: none|random|saliency|affinity; empty = engine default");
ABSL_FLAG(double, keep_ratio, 0, "Default keep ratio in (0, 1]; 0 = engine default");
ABSL_FLAG(std::string, expert_predictor, kDefaults.expert_predictor,
          "Expert predictor driving prefetch and guarded eviction: none | history | "
          "router-lookahead | mlp-lookahead (mlp-lookahead needs --calibration_profile)");
ABSL_FLAG(std::string, calibration_profile, "",
          "Calibration profile JSON written by vismoe-calibrate (mlp-lookahead weights, "
          "router-lookahead default vectors, Eq. 10 costs); empty = none");
ABSL_FLAG(std::string, expert_skipping, kDefaults.expert_skipping,
          "MoDES expert skipping (lossy): none | dual-threshold (skip a routed expert when "
          "alpha(l) * routing weight < the token's threshold)");
ABSL_FLAG(double, skip_tau_text, kDefaults.skip_tau_text,
          "Expert skipping threshold of text tokens, >= 0; -1 = the calibration profile's");
ABSL_FLAG(double, skip_tau_visual, kDefaults.skip_tau_visual,
          "Expert skipping threshold of visual tokens, >= 0; -1 = the calibration profile's");
ABSL_FLAG(std::string, preload, kDefaults.preload,
          "Per-sequence preload (MELINOE): none | prefill-routing (after its prefill, a "
          "sequence's top experts per offloaded layer by prefill routing mass are copied in and "
          "kept for it until it ends)");
ABSL_FLAG(int, preload_experts, kDefaults.preload_experts,
          "Experts preloaded per offloaded layer; 0 = the model's top-k");
ABSL_FLAG(double, preload_share, kDefaults.preload_share,
          "Fraction of the slab cache, in (0, 1], that all running sequences' preloaded experts "
          "may hold together");

ABSL_FLAG(std::string, miss_policy, kDefaults.miss_policy,
          "What an offloaded MoE layer does about a routed expert neither resident nor in "
          "flight: fetch (exact) | cpu (compute it on the host when the measured host time is "
          "below its copy time; exact) | commit (lossy, paper 003: uncertain tokens compute with "
          "predicted experts already there; needs --expert_predictor)");
ABSL_FLAG(std::string, host_experts, kDefaults.host_experts,
          "Where expert copies are read from: mapped (the mmapped checkpoint, no second host "
          "copy) | packed (a packed copy, page-locked on CUDA) | auto (packed only where a "
          "page-locked copy fits the host's available memory with room to spare)");
ABSL_FLAG(std::string, expert_dtype, kDefaults.expert_dtype,
          "The dtype routed experts are kept in: auto (as the checkpoint stores them) | fp8 "
          "(bf16/f16/f32 experts quantised at load to 128x128-block FP8, half the bytes per "
          "copy; lossy; --backend=auto keeps it on the CPU until its CUDA path has run on a GPU)");
ABSL_FLAG(double, commit_threshold, kDefaults.commit_threshold,
          "Commit below this router certainty (KL to uniform, nats), >= 0; -1 = the calibration "
          "profile's");
ABSL_FLAG(double, commit_owa_alpha1, kDefaults.commit_owa_alpha1,
          "Commit's Output Weight Adjustment alpha_1 (Eq. 5), >= 0; 0 = OWA off");
ABSL_FLAG(double, commit_owa_alpha2, kDefaults.commit_owa_alpha2,
          "Commit's Output Weight Adjustment alpha_2 (Eq. 6), > 0");
ABSL_FLAG(int, commit_owa_min_correct, kDefaults.commit_owa_min_correct,
          "OWA applies to tokens keeping at least this many of their router's experts; -1 = "
          "ceil(top_k / 2)");
ABSL_FLAG(int, commit_owa_max_correct, kDefaults.commit_owa_max_correct,
          "OWA applies to tokens keeping at most this many of their router's experts; -1 = "
          "top_k - 1");
ABSL_FLAG(bool, speculative_execution, kDefaults.speculative_execution,
          "Speculative execution of prefetched experts (lossy, paper 004; CPU backend): while a "
          "decode step's MoE layer waits on a copy, compute the next layer's predicted experts "
          "on the quasi-hidden state and keep those its router picks");

namespace vismoe::server {
namespace {

absl::Status BadValue(absl::string_view key, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("option ", key, ": invalid value \"", value, "\": ", why));
}

absl::Status ParseInt(absl::string_view key, absl::string_view value, int* out) {
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), out)) {
    return BadValue(key, value, "expected an integer");
  }
  return absl::OkStatus();
}

absl::Status ParseInt64(absl::string_view key, absl::string_view value, int64_t* out) {
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), out)) {
    return BadValue(key, value, "expected an integer");
  }
  return absl::OkStatus();
}

absl::Status ParseBool(absl::string_view key, absl::string_view value, bool* out) {
  if (!absl::SimpleAtob(absl::StripAsciiWhitespace(value), out)) {
    return BadValue(key, value, "expected true or false");
  }
  return absl::OkStatus();
}

absl::Status ParseBytes(absl::string_view key, absl::string_view value, int64_t* out) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(value);
  if (!bytes.ok()) return BadValue(key, value, bytes.status().message());
  *out = *bytes;
  return absl::OkStatus();
}

using Setter =
    std::function<absl::Status(absl::string_view key, absl::string_view value, ServerOptions*)>;
using Getter = std::function<std::string(const ServerOptions&)>;
struct OptionDef {
  std::string key;
  Setter set;
  Getter get;
};

// An expert skipping threshold: a number, >= 0 or -1 ("from the profile").
OptionDef SkipThresholdOption(const char* key, double ServerOptions::*field) {
  return OptionDef{
      key,
      [field](absl::string_view k, absl::string_view v, ServerOptions* o) {
        double x = 0;
        if (!absl::SimpleAtod(absl::StripAsciiWhitespace(v), &x) || !std::isfinite(x)) {
          return BadValue(k, v, "expected a number");
        }
        if (x < 0 && x != -1) {
          return BadValue(k, v,
                          "expected a threshold >= 0, or -1 for the "
                          "calibration profile's");
        }
        o->*field = x;
        return absl::OkStatus();
      },
      [field](const ServerOptions& o) { return absl::StrCat(o.*field); }};
}

// A finite number accepted by `ok`, which names what it expects.
OptionDef NumberOption(const char* key, double ServerOptions::*field, bool (*ok)(double),
                       const char* expected) {
  return OptionDef{
      key,
      [field, ok, expected](absl::string_view k, absl::string_view v, ServerOptions* o) {
        double x = 0;
        if (!absl::SimpleAtod(absl::StripAsciiWhitespace(v), &x) || !std::isfinite(x) || !ok(x)) {
          return BadValue(k, v, expected);
        }
        o->*field = x;
        return absl::OkStatus();
      },
      [field](const ServerOptions& o) { return absl::StrCat(o.*field); }};
}

// An OWA trigger bound: >= 1, or -1 for the default.
OptionDef CorrectBoundOption(const char* key, int ServerOptions::*field) {
  return OptionDef{key,
                   [field](absl::string_view k, absl::string_view v, ServerOptions* o) {
                     int x = 0;
                     VISMOE_RETURN_IF_ERROR(ParseInt(k, v, &x));
                     if (x < 1 && x != -1) return BadValue(k, v, "expected >= 1, or -1");
                     o->*field = x;
                     return absl::OkStatus();
                   },
                   [field](const ServerOptions& o) { return absl::StrCat(o.*field); }};
}

#define VISMOE_STRING_OPTION(name)                                                      \
  OptionDef {                                                                           \
#name,                                                                                \
        [](absl::string_view, absl::string_view v, ServerOptions* o) {                    \
          o->name = std::string(v);                                                       \
          return absl::OkStatus();                                                        \
        },                                                                                \
        [](const ServerOptions& o) { return o.name; } \
  }
#define VISMOE_INT_OPTION(name)                                                                    \
  OptionDef {                                                                                      \
#name, [](absl::string_view k, absl::string_view v,                                            \
              ServerOptions *                                                                      \
                  o) { return ParseInt(k, v, &o->name); },                                         \
                                                        [](const ServerOptions&                    \
                                                               o) { return absl::StrCat(o.name); } \
  }
#define VISMOE_BOOL_OPTION(name)                                                    \
  OptionDef {                                                                       \
#name,                                                                            \
        [](absl::string_view k, absl::string_view v, ServerOptions* o) {              \
          return ParseBool(k, v, &o->name);                                           \
        },                                                                            \
        [](const ServerOptions& o) { return std::string(o.name ? "true" : "false"); } \
  }
#define VISMOE_BYTES_OPTION(name)                                                                 \
  OptionDef {                                                                                     \
#name,                                                                                        \
        [](absl::string_view k, absl::string_view v,                                              \
           ServerOptions *                                                                        \
               o) { return ParseBytes(k, v, &o->name); },                                         \
                                                       [](const ServerOptions&                    \
                                                              o) { return absl::StrCat(o.name); } \
  }

const std::vector<OptionDef>& OptionDefs() {
  static const auto* defs = new std::vector<OptionDef>{
      VISMOE_STRING_OPTION(model),
      OptionDef{"synthetic_weights",
                [](absl::string_view k, absl::string_view v, ServerOptions* o) {
                  if (!absl::SimpleAtob(absl::StripAsciiWhitespace(v), &o->synthetic_weights)) {
                    return BadValue(k, v, "expected true or false");
                  }
                  return absl::OkStatus();
                },
                [](const ServerOptions& o) {
                  return std::string(o.synthetic_weights ? "true" : "false");
                }},
      OptionDef{"synthetic_seed",
                [](absl::string_view k, absl::string_view v, ServerOptions* o) {
                  VISMOE_RETURN_IF_ERROR(ParseInt64(k, v, &o->synthetic_seed));
                  if (o->synthetic_seed < 0) return BadValue(k, v, "must be >= 0");
                  return absl::OkStatus();
                },
                [](const ServerOptions& o) { return absl::StrCat(o.synthetic_seed); }},
      VISMOE_STRING_OPTION(synthetic_routing),
      VISMOE_STRING_OPTION(backend),
      VISMOE_BYTES_OPTION(gpu_memory_budget),
      VISMOE_INT_OPTION(engine_threads),
      VISMOE_INT_OPTION(max_context_tokens),
      VISMOE_STRING_OPTION(listen),
      VISMOE_STRING_OPTION(metrics_listen),
      VISMOE_BYTES_OPTION(max_message_bytes),
      VISMOE_STRING_OPTION(http_listen),
      VISMOE_INT_OPTION(http_threads),
      OptionDef{
          "http_request_timeout",
          [](absl::string_view k, absl::string_view v, ServerOptions* o) {
            if (!absl::ParseDuration(absl::StripAsciiWhitespace(v), &o->http_request_timeout) ||
                o->http_request_timeout <= absl::ZeroDuration()) {
              return BadValue(k, v, "expected a positive duration such as 10m");
            }
            return absl::OkStatus();
          },
          [](const ServerOptions& o) { return absl::FormatDuration(o.http_request_timeout); }},
      VISMOE_STRING_OPTION(served_model_name),
      VISMOE_STRING_OPTION(tls_cert),
      VISMOE_STRING_OPTION(tls_key),
      OptionDef{"api_key",
                [](absl::string_view, absl::string_view v, ServerOptions* o) {
                  o->api_key = std::string(v);
                  return absl::OkStatus();
                },
                [](const ServerOptions& o) {
                  return std::string(o.api_key.empty() ? "<unset>" : "<set>");
                }},
      VISMOE_STRING_OPTION(api_key_file),
      VISMOE_INT_OPTION(max_queue),
      VISMOE_INT_OPTION(workers),
      VISMOE_INT_OPTION(max_step_tokens),
      VISMOE_INT_OPTION(kv_cache_tokens),
      VISMOE_INT_OPTION(prepare_threads),
      VISMOE_INT_OPTION(decode_threads),
      OptionDef{"drain_timeout",
                [](absl::string_view k, absl::string_view v, ServerOptions* o) {
                  if (!absl::ParseDuration(absl::StripAsciiWhitespace(v), &o->drain_timeout) ||
                      o->drain_timeout < absl::ZeroDuration()) {
                    return BadValue(k, v, "expected a non-negative duration such as 30s");
                  }
                  return absl::OkStatus();
                },
                [](const ServerOptions& o) { return absl::FormatDuration(o.drain_timeout); }},
      VISMOE_INT_OPTION(max_images),
      VISMOE_BYTES_OPTION(max_image_bytes),
      OptionDef{"max_image_pixels",
                [](absl::string_view k, absl::string_view v, ServerOptions* o) {
                  return ParseInt64(k, v, &o->max_image_pixels);
                },
                [](const ServerOptions& o) { return absl::StrCat(o.max_image_pixels); }},
      VISMOE_INT_OPTION(max_jpeg_scans),
      VISMOE_BOOL_OPTION(apply_exif_orientation),
      VISMOE_INT_OPTION(max_prompt_tokens),
      VISMOE_BYTES_OPTION(max_prompt_bytes),
      VISMOE_INT_OPTION(max_new_tokens_limit),
      VISMOE_INT_OPTION(max_stop_strings),
      VISMOE_BOOL_OPTION(allow_special_tokens_in_text),
      OptionDef{"pinned_layers",
                [](absl::string_view k, absl::string_view v, ServerOptions* o) {
                  int64_t x = 0;
                  VISMOE_RETURN_IF_ERROR(ParseInt64(k, v, &x));
                  if (x < -1 || x > 100000) return BadValue(k, v, "expected -1 or a layer count");
                  o->pinned_layers = static_cast<int>(x);
                  return absl::OkStatus();
                },
                [](const ServerOptions& o) { return absl::StrCat(o.pinned_layers); }},
      VISMOE_BYTES_OPTION(copy_bandwidth),
      VISMOE_STRING_OPTION(eviction),
      VISMOE_INT_OPTION(host_moe_layers),
      VISMOE_STRING_OPTION(token_compressor),
      OptionDef{"keep_ratio",
                [](absl::string_view k, absl::string_view v, ServerOptions* o) {
                  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(v), &o->keep_ratio)) {
                    return BadValue(k, v, "expected a number");
                  }
                  return absl::OkStatus();
                },
                [](const ServerOptions& o) { return absl::StrCat(o.keep_ratio); }},
      VISMOE_STRING_OPTION(expert_predictor),
      VISMOE_STRING_OPTION(calibration_profile),
      VISMOE_STRING_OPTION(expert_skipping),
      SkipThresholdOption("skip_tau_text", &ServerOptions::skip_tau_text),
      SkipThresholdOption("skip_tau_visual", &ServerOptions::skip_tau_visual),
      VISMOE_STRING_OPTION(preload),
      VISMOE_INT_OPTION(preload_experts),
      OptionDef{"preload_share",
                [](absl::string_view k, absl::string_view v, ServerOptions* o) {
                  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(v), &o->preload_share)) {
                    return BadValue(k, v, "expected a number");
                  }
                  return absl::OkStatus();
                },
                [](const ServerOptions& o) { return absl::StrCat(o.preload_share); }},
      VISMOE_STRING_OPTION(miss_policy),
      VISMOE_STRING_OPTION(host_experts),
      VISMOE_STRING_OPTION(expert_dtype),
      SkipThresholdOption("commit_threshold", &ServerOptions::commit_threshold),
      NumberOption(
          "commit_owa_alpha1", &ServerOptions::commit_owa_alpha1,
          [](double x) { return x >= 0 && x <= kMaxOwaAlpha; },
          "expected a number in [0, 16] (0 = OWA off; the paper's values are near 1)"),
      NumberOption(
          "commit_owa_alpha2", &ServerOptions::commit_owa_alpha2,
          [](double x) { return x > 0 && x <= kMaxOwaAlpha; }, "expected a number in (0, 16]"),
      CorrectBoundOption("commit_owa_min_correct", &ServerOptions::commit_owa_min_correct),
      CorrectBoundOption("commit_owa_max_correct", &ServerOptions::commit_owa_max_correct),
      VISMOE_BOOL_OPTION(speculative_execution),
  };
  return *defs;
}

#undef VISMOE_STRING_OPTION
#undef VISMOE_INT_OPTION
#undef VISMOE_BYTES_OPTION
#undef VISMOE_BOOL_OPTION

}  // namespace

const std::vector<std::string>& ServerOptionKeys() {
  static const auto* keys = [] {
    auto* k = new std::vector<std::string>;
    for (const OptionDef& d : OptionDefs()) k->push_back(d.key);
    return k;
  }();
  return *keys;
}

std::string ServerOptions::DebugString() const {
  std::string out;
  for (const OptionDef& d : OptionDefs())
    absl::StrAppend(&out, "  ", d.key, " = ", d.get(*this), "\n");
  return out;
}

absl::Status SetServerOption(absl::string_view key, absl::string_view value,
                             ServerOptions* options) {
  for (const OptionDef& d : OptionDefs()) {
    if (d.key == key) return d.set(key, value, options);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown option \"", key, "\""));
}

absl::Status ApplyConfigJson(absl::string_view json_text, absl::string_view source,
                             ServerOptions* options) {
  const nlohmann::json doc = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                                   /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("config ", source, ": not valid JSON"));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("config ", source, ": expected a JSON object"));
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    std::string value;
    if (it->is_string()) {
      value = it->get<std::string>();
    } else if (it->is_boolean()) {
      value = it->get<bool>() ? "true" : "false";
    } else if (it->is_number()) {
      value = it->dump();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("config ", source, ": key \"", key,
                                                     "\" must be a string, number or boolean"));
    }
    absl::Status s = SetServerOption(key, value, options);
    if (!s.ok()) {
      std::string msg = absl::StrCat("config ", source, ": ", s.message());
      if (absl::StartsWith(s.message(), "unknown option")) {
        absl::StrAppend(&msg, " (known keys: ", absl::StrJoin(ServerOptionKeys(), ", "), ")");
      }
      return absl::InvalidArgumentError(msg);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions options;
  options.model = absl::GetFlag(FLAGS_model);
  const std::string config = absl::GetFlag(FLAGS_config);
  if (!config.empty()) {
    std::ifstream in(config, std::ios::binary);
    if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read config file ", config));
    std::stringstream ss;
    ss << in.rdbuf();
    VISMOE_RETURN_IF_ERROR(ApplyConfigJson(ss.str(), config, &options));
  }
  for (const std::string& key : ServerOptionKeys()) {
    if (!absl::flags_internal::WasPresentOnCommandLine(key)) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(key);
    if (flag == nullptr) return absl::InternalError(absl::StrCat("flag --", key, " not defined"));
    VISMOE_RETURN_IF_ERROR(SetServerOption(key, flag->CurrentValue(), &options));
  }
  VISMOE_RETURN_IF_ERROR(FinalizeServerOptions(&options));
  return options;
}

}  // namespace vismoe::server
