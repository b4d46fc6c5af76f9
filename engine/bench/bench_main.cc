// vismoe-bench: runs a request set against a checkpoint under a device memory
// budget through the public Engine API and prints a JSON report: TTFT, TPOT,
// hit ratio, Hot Recall, bytes moved, stall time, and the bound
// max(compute, missed bytes / measured copy bandwidth) measured in this run.
// --ablation adds the VisMMOE Table 4 rows (ablation.h), --micro the policy
// micro benchmarks (micro.h), --micro_kernels the CPU matrix kernels
// (kernel_micro.h), --batch_sizes the batch sweep (batch_sweep.h), --concurrency the
// concurrency sweep (concurrency_sweep.h), --routing_stats the routing statistics
// (routing_stats_run.h),
// --device_op_timing the device time per op family (device_op_times.h).
// Flags: bench_options.cc; README.md documents them.
//
//   vismoe-bench --model DIR --budget 24G [--requests FILE.jsonl | --prompt T [--image F]]
//                [--prefetch none|history|router-lookahead|mlp-lookahead] [--repeat N]
//                [--token_compressor none|random|saliency|affinity --keep_ratio B]
//                [--ablation] [--micro] [--micro_kernels] [--json_out F]
// Exit codes: 0 ok, 2 bad flags or request set, 1 engine or run failure.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "engine/bench/ablation.h"
#include "engine/bench/batch_sweep.h"
#include "engine/bench/bench_options.h"
#include "engine/bench/concurrency_sweep.h"
#include "engine/bench/device_op_times.h"
#include "engine/bench/kernel_micro.h"
#include "engine/bench/micro.h"
#include "engine/bench/report.h"
#include "engine/bench/request_set.h"
#include "engine/bench/routing_stats_run.h"
#include "engine/bench/run_summary.h"
#include "engine/core/help_flag.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vismoe::bench {
namespace {

int Main() {
  auto options = BenchOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  const BenchOptions& b = *options;
  auto requests = b.requests_path.empty() ? [&]() -> absl::StatusOr<std::vector<BenchRequest>> {
    auto r = SingleRequest(b.prompt, b.image_path, b.synthetic_images, b.synthetic_image_size,
                           b.max_new_tokens);
    if (!r.ok()) return r.status();
    return std::vector<BenchRequest>{*std::move(r)};
  }()
      : LoadRequestSet(b.requests_path, b.max_new_tokens);
  if (!requests.ok()) {
    std::fprintf(stderr, "%s\n", std::string(requests.status().message()).c_str());
    return 2;
  }

  BenchSink phases;  // the decode hit ratio apart from prefill's; device op times
  EngineOptions engine_options = b.engine;
  engine_options.stats = &phases;
  const auto startup = std::chrono::steady_clock::now();
  auto engine = Engine::Create(engine_options);
  const double startup_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - startup).count();
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  auto summary = RunRequestSet(**engine, *requests, b.repeat, &phases);
  if (!summary.ok()) {
    std::fprintf(stderr, "request failed: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  std::vector<ConcurrencyRow> concurrency;
  if (!b.concurrency.empty()) {
    auto rows =
        RunConcurrencySweep(**engine, requests->front(), b.concurrency, b.concurrency_same_prompt);
    if (!rows.ok()) {
      std::fprintf(stderr, "concurrency sweep: %s\n", rows.status().ToString().c_str());
      return 1;
    }
    concurrency = *std::move(rows);
  }
  nlohmann::json routing_stats;
  if (b.routing_stats) {
    auto stats =
        RunRoutingStats(**engine, *requests, static_cast<float>(b.routing_stats_temperature));
    if (!stats.ok()) {
      std::fprintf(stderr, "%s\n", stats.status().ToString().c_str());
      return 1;
    }
    routing_stats = *std::move(stats);
    std::fprintf(stderr, "%s", RoutingStatsTable(routing_stats).c_str());
  }
  const ModelInfo info = (*engine)->info();
  const std::string& backend = info.backend;
  const int64_t peak_rss = PeakRssBytes();  // before the ablation engines load
  engine->reset();                          // free its memory before the ablation engines load

  // The plan's slab size counts experts as the offload runtime holds them
  // (FP8 under --expert_dtype=fp8); the checkpoint's when all are resident.
  const int64_t expert_bytes = info.slab_bytes > 0
                                   ? info.slab_bytes
                                   : ExpertBytes(b.engine.model_path, b.engine.synthetic_weights);
  const double bw = MeasureCopyBandwidth(backend, b.copy_bandwidth_limit, expert_bytes);
  nlohmann::json report = {
      {"model", b.engine.model_path},
      {"synthetic_weights", b.engine.synthetic_weights},
      {"synthetic_routing", b.engine.synthetic_routing},
      {"backend", backend},
      {"budget_bytes", b.engine.gpu_memory_budget_bytes},
      {"pinned_layers_flag", b.engine.offload.pinned_layers},
      {"eviction", b.engine.offload.eviction},
      {"prefetch", b.engine.offload.prefetch},
      {"prefetch_count", b.engine.offload.prefetch_count},
      {"lookahead_window", b.engine.offload.lookahead_window},
      {"preload", b.engine.offload.preload},
      {"preload_experts", b.engine.offload.preload_experts},
      {"preload_share", b.engine.offload.preload_share},
      {"calibration_profile", b.engine.calibration_profile},
      {"token_compressor", b.engine.compression.kind},
      {"keep_ratio", b.keep_ratio},
      {"copy_bandwidth_limit_bytes_per_s", b.copy_bandwidth_limit},
      {"host_experts", b.engine.offload.host_experts},
      {"expert_dtype", b.engine.offload.expert_dtype},
      {"slabs", info.num_slabs},
      {"pinned_layers", info.pinned_layers},
      {"miss_policy", b.engine.offload.miss_policy},
      {"host_moe_layers", b.engine.offload.host_moe_layers},
      {"checkpoint_bytes", CheckpointBytes(b.engine.model_path, b.engine.synthetic_weights)},
      {"peak_rss_bytes", peak_rss},
      {"startup_seconds", startup_seconds}};
  report.update(SummaryJson(*summary, expert_bytes, bw));
  report["device_op_timing"] = phases.Json();
  if (!concurrency.empty()) report["concurrency_sweep"] = ConcurrencyJson(concurrency);
  if (!routing_stats.is_null()) report["routing_stats"] = routing_stats;
  if (b.engine.device_op_timing) std::fprintf(stderr, "%s", phases.Table().c_str());

  if (b.ablation) {
    auto rows = RunAblation(AblationConfigs(b.engine, b.keep_ratio, b.ablation_predictor),
                            *requests, b.repeat);
    if (!rows.ok()) {
      std::fprintf(stderr, "%s\n", rows.status().ToString().c_str());
      return 1;
    }
    PrintAblationTable(*rows, stderr);
    report["ablation"] = AblationJson(*rows);
  }
  if (b.micro) {
    MicroOptions mo;
    mo.model_path = b.engine.model_path;
    mo.synthetic_weights = b.engine.synthetic_weights;
    mo.synthetic_seed = b.engine.synthetic_seed;
    mo.min_seconds = b.micro_seconds;
    mo.keep_ratio = b.keep_ratio;
    mo.pinned_layers = b.engine.offload.pinned_layers > 0 ? b.engine.offload.pinned_layers : 1;
    mo.prefetch_count = b.engine.offload.prefetch_count;
    mo.lookahead_window = b.engine.offload.lookahead_window;
    auto micro = RunMicroBenchmarks(mo);
    if (!micro.ok()) {
      std::fprintf(stderr, "micro benchmarks: %s\n", micro.status().ToString().c_str());
      return 1;
    }
    report["micro"] = MicroJson(*micro);
  }
  if (b.micro_kernels) {
    KernelMicroOptions ko;
    ko.model_path = b.engine.model_path;
    ko.min_seconds = b.micro_seconds;
    ko.num_threads = b.engine.num_threads;
    ko.dtypes = b.micro_kernel_dtypes;
    auto kernels = RunKernelMicroBenchmarks(ko);
    if (!kernels.ok()) {
      std::fprintf(stderr, "kernel micro benchmarks: %s\n", kernels.status().ToString().c_str());
      return 1;
    }
    report["micro_kernels"] = *std::move(kernels);
  }

  if (!b.batch_sizes.empty()) {
    BatchSweepOptions so;
    so.model_path = b.engine.model_path;
    so.synthetic_weights = b.engine.synthetic_weights;
    so.synthetic_seed = b.engine.synthetic_seed;
    so.synthetic_routing =
        *ParseSyntheticRouting(b.engine.synthetic_routing);  // checked by the flags
    so.budget_bytes = b.engine.gpu_memory_budget_bytes;
    so.pinned_layers = b.engine.offload.pinned_layers;
    so.offload = b.engine.offload;
    so.kv_cache_tokens = b.engine.max_context_tokens;
    so.batch_sizes = b.batch_sizes;
    so.prompt_tokens = b.batch_prompt_tokens;
    so.decode_steps = b.batch_decode_steps;
    so.num_threads = b.engine.num_threads;
    auto rows = RunBatchSweep(so);
    if (!rows.ok()) {
      std::fprintf(stderr, "batch sweep: %s\n", rows.status().ToString().c_str());
      return 1;
    }
    report["batch_sweep"] = {{"backend", "cpu"},
                             {"prompt_tokens", so.prompt_tokens},
                             {"decode_steps", so.decode_steps},
                             {"rows", BatchSweepJson(*rows, so.decode_steps)}};
  }
  // Generated text may end inside a UTF-8 sequence: replace, never throw.
  const std::string text = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
  if (!b.json_out.empty()) {
    std::ofstream f(b.json_out);
    f << text << "\n";
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", b.json_out.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace vismoe::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "vismoe-bench runs requests through the Engine under a device memory budget and prints a "
      "JSON report.\nUsage: vismoe-bench --model=DIR [--budget=12.5M] [--requests=FILE.jsonl | "
      "--prompt=TEXT --image=F.jpg] [flags]");
  vismoe::ExitOnHelpFlag(argc, argv, "/engine/bench/");
  absl::ParseCommandLine(argc, argv);
  // stdout carries only the JSON report: logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("vismoe-bench"));
  return vismoe::bench::Main();
}
