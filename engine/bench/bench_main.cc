// vismoe-bench: runs a request set against a checkpoint under a device memory
// budget through the public Engine API and prints a JSON report: TTFT, TPOT,
// hit ratio, Hot Recall, bytes moved, stall time, and the bound
// max(compute, missed bytes / measured copy bandwidth) measured in this run.
//
//   vismoe-bench --model DIR --budget 24G [--pinned_layers -1] [--copy_bandwidth 25G]
//                [--eviction lru|lfu|guarded] [--prefetch none|history]
//                [--prompt TEXT | --requests FILE.jsonl] [--max_new_tokens 32]
//                [--max_context_tokens 4096] [--json_out F]
// A --requests line is {"prompt": "...", "max_new_tokens": N (optional)}.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/transfer_engine.h"
#include "engine/runtime/engine.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint directory");
ABSL_FLAG(std::string, budget, "0",
          "device memory budget in bytes (K/M/G suffix ok); 0 = all resident");
ABSL_FLAG(int, pinned_layers, -1, "MoE layers in the pinned prefix; -1 = Eq. 10");
ABSL_FLAG(std::string, copy_bandwidth, "0", "CPU copy engine bytes/s (K/M/G ok); 0 = unthrottled");
ABSL_FLAG(std::string, eviction, "lru", "lru | lfu | guarded");
ABSL_FLAG(std::string, prefetch, "none", "none | history");
ABSL_FLAG(std::string, prompt, "Describe a mixture of experts model in one sentence.",
          "prompt of a single request (ignored with --requests)");
ABSL_FLAG(std::string, requests, "", "JSONL request set");
ABSL_FLAG(int, max_new_tokens, 32, "tokens to generate per request (default for --requests)");
ABSL_FLAG(int, max_context_tokens, 4096, "KV cache capacity (counts against the budget)");
ABSL_FLAG(int, threads, 0, "CPU kernel threads; 0 = all cores");
ABSL_FLAG(std::string, json_out, "", "also write the report here");

namespace vismoe {
namespace {

// "24G" -> 24 * 2^30. False on junk.
bool ParseBytes(const std::string& s, double* out) {
  if (s.empty()) return false;
  double mult = 1;
  std::string num = s;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (last == 'K' || last == 'M' || last == 'G' || last == 'T') {
    mult = last == 'K'   ? 1024.0
           : last == 'M' ? 1048576.0
           : last == 'G' ? 1073741824.0
                         : 1099511627776.0;
    num = s.substr(0, s.size() - 1);
  }
  double v = 0;
  if (!absl::SimpleAtod(num, &v) || v < 0) return false;
  *out = v * mult;
  return true;
}

struct BenchRequest {
  std::string prompt;
  int max_new_tokens;
};

absl::StatusOr<std::vector<BenchRequest>> LoadRequests() {
  std::vector<BenchRequest> out;
  const std::string path = absl::GetFlag(FLAGS_requests);
  if (path.empty()) {
    out.push_back({absl::GetFlag(FLAGS_prompt), absl::GetFlag(FLAGS_max_new_tokens)});
    return out;
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open --requests file ", path));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", n, ": expected {\"prompt\": string, \"max_new_tokens\": int}"));
    }
    BenchRequest r{j["prompt"].get<std::string>(), absl::GetFlag(FLAGS_max_new_tokens)};
    if (j.contains("max_new_tokens") && j["max_new_tokens"].is_number_integer()) {
      r.max_new_tokens = j["max_new_tokens"].get<int>();
    }
    out.push_back(r);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " has no requests"));
  return out;
}

// Copy bandwidth of the same copy path and throttle, measured in this run.
double MeasureCopyBandwidth(double throttle, int64_t block_bytes) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(block_bytes, 4096));
  constexpr int kCopies = 16;
  std::vector<char> src(bytes, 1), dst(bytes * kCopies);
  TransferEngine te(TransferEngine::Options{throttle, false});
  for (int i = 0; i < kCopies; ++i) {
    TransferEngine::Request r;
    r.src = src.data();
    r.dst = dst.data() + i * bytes;
    r.bytes = bytes;
    te.Submit(std::move(r));
  }
  te.WaitIdle();
  return te.MeasuredBandwidth();
}

int Main() {
  EngineOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
  double budget = 0, bandwidth = 0;
  if (!ParseBytes(absl::GetFlag(FLAGS_budget), &budget) ||
      !ParseBytes(absl::GetFlag(FLAGS_copy_bandwidth), &bandwidth)) {
    std::fprintf(stderr, "--budget and --copy_bandwidth take a number with an optional K/M/G\n");
    return 2;
  }
  options.gpu_memory_budget_bytes = static_cast<int64_t>(budget);
  options.offload.pinned_layers = absl::GetFlag(FLAGS_pinned_layers);
  options.offload.copy_bandwidth_bytes_per_s = bandwidth;
  options.offload.eviction = absl::GetFlag(FLAGS_eviction);
  options.offload.prefetch = absl::GetFlag(FLAGS_prefetch);
  auto requests = LoadRequests();
  if (!requests.ok()) {
    std::fprintf(stderr, "%s\n", requests.status().ToString().c_str());
    return 2;
  }
  auto engine = Engine::Create(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  // Expert size, for missed bytes.
  int64_t expert_bytes = 0;
  auto config = ModelConfig::Load(options.model_path);
  auto ckpt = Checkpoint::Open(options.model_path);
  if (config.ok() && ckpt.ok()) {
    const std::string prefix = Qwen3VlMoeModel::TextPrefix(*config);
    auto sizes = MeasureModelSizes(**ckpt, config->text, prefix);
    if (sizes.ok()) expert_bytes = sizes->expert_bytes;
  }

  nlohmann::json per = nlohmann::json::array();
  OffloadStats sum;
  double ttft = 0, tpot = 0, total = 0;
  int tpot_n = 0, prompt_tokens = 0, completion_tokens = 0;
  for (const BenchRequest& br : *requests) {
    GenerateRequest req;
    ChatMessage m;
    m.role = "user";
    ContentPart part;
    part.text = br.prompt;
    m.content.push_back(part);
    req.messages.push_back(m);
    req.sampling.max_new_tokens = br.max_new_tokens;
    auto r = (*engine)->Generate(req, {});
    if (!r.ok()) {
      std::fprintf(stderr, "request failed: %s\n", r.status().ToString().c_str());
      return 1;
    }
    const OffloadStats& o = r->offload;
    sum.cache_queries += o.cache_queries;
    sum.cache_hits += o.cache_hits;
    sum.prefetch_needed += o.prefetch_needed;
    sum.prefetch_recalled += o.prefetch_recalled;
    sum.prefetch_issued += o.prefetch_issued;
    sum.prefetch_used += o.prefetch_used;
    sum.bytes_h2d += o.bytes_h2d;
    sum.stall_seconds += o.stall_seconds;
    ttft += r->timings.ttft_seconds;
    if (r->usage.completion_tokens > 1) {
      tpot += r->timings.tpot_seconds;
      ++tpot_n;
    }
    total += r->timings.total_seconds;
    prompt_tokens += r->usage.prompt_tokens;
    completion_tokens += r->usage.completion_tokens;
    per.push_back({{"prompt_tokens", r->usage.prompt_tokens},
                   {"completion_tokens", r->usage.completion_tokens},
                   {"ttft_seconds", r->timings.ttft_seconds},
                   {"tpot_seconds", r->timings.tpot_seconds},
                   {"total_seconds", r->timings.total_seconds},
                   {"cache_queries", o.cache_queries},
                   {"cache_hits", o.cache_hits},
                   {"bytes_h2d", o.bytes_h2d},
                   {"stall_seconds", o.stall_seconds}});
  }
  const double bw = MeasureCopyBandwidth(bandwidth, expert_bytes);
  const uint64_t missed = sum.prefetch_needed - sum.prefetch_recalled;
  const double missed_bytes = static_cast<double>(missed) * static_cast<double>(expert_bytes);
  const double compute = std::max(0.0, total - sum.stall_seconds);
  const double copy_floor = bw > 0 ? missed_bytes / bw : 0;
  const double n = static_cast<double>(requests->size());
  nlohmann::json report = {
      {"model", options.model_path},
      {"backend", (*engine)->info().backend},
      {"budget_bytes", options.gpu_memory_budget_bytes},
      {"pinned_layers_flag", options.offload.pinned_layers},
      {"eviction", options.offload.eviction},
      {"prefetch", options.offload.prefetch},
      {"copy_bandwidth_limit_bytes_per_s", bandwidth},
      {"requests", requests->size()},
      {"prompt_tokens", prompt_tokens},
      {"completion_tokens", completion_tokens},
      {"ttft_seconds_mean", ttft / n},
      {"tpot_seconds_mean", tpot_n > 0 ? tpot / tpot_n : 0.0},
      {"total_seconds", total},
      {"cache_queries", sum.cache_queries},
      {"cache_hits", sum.cache_hits},
      {"hit_ratio", sum.cache_queries > 0 ? static_cast<double>(sum.cache_hits) /
                                                static_cast<double>(sum.cache_queries)
                                          : 1.0},
      {"prefetch_needed", sum.prefetch_needed},
      {"prefetch_recalled", sum.prefetch_recalled},
      {"hot_recall", sum.prefetch_needed > 0 ? static_cast<double>(sum.prefetch_recalled) /
                                                   static_cast<double>(sum.prefetch_needed)
                                             : 1.0},
      {"prefetch_issued", sum.prefetch_issued},
      {"prefetch_used", sum.prefetch_used},
      {"bytes_h2d", sum.bytes_h2d},
      {"stall_seconds", sum.stall_seconds},
      {"expert_bytes", expert_bytes},
      {"missed_experts", missed},
      {"missed_bytes", missed_bytes},
      {"copy_bandwidth_measured_bytes_per_s", bw},
      {"compute_seconds", compute},
      {"bound_seconds", std::max(compute, copy_floor)},
      {"per_request", per}};
  const std::string text = report.dump(2);
  std::printf("%s\n", text.c_str());
  const std::string out = absl::GetFlag(FLAGS_json_out);
  if (!out.empty()) {
    std::ofstream f(out);
    f << text << "\n";
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", out.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace vismoe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return vismoe::Main();
}
