// vismoe-calibrate: records routing traces of a calibration request set,
// trains the mlp-lookahead predictor, reports held-out Hot Recall@B of every
// predictor side by side, picks L_pinned by Eq. 10 for a budget, and writes
// the calibration profile the server loads (--calibration_profile).
//   vismoe-calibrate --model DIR --requests FILE.jsonl --budget 24G --out profile.json
// The JSONL format is vismoe-bench's (engine/bench/request_set.h). Progress goes
// to stderr, the JSON report to stdout (and --json_out). Exit codes: 0 ok,
// 2 bad flags or input (one line naming the file:line or flag), 1 failures.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "engine/bench/request_set.h"
#include "engine/calibrate/calibrator.h"
#include "engine/core/byte_size.h"
#include "engine/core/help_flag.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model, "", "Hugging Face checkpoint directory");
ABSL_FLAG(std::string, requests, "",
          "calibration requests, JSONL (see engine/bench/request_set.h)");
ABSL_FLAG(std::string, budget, "", "device memory budget Eq. 10 plans for (bytes, K/M/G/T)");
ABSL_FLAG(double, held_out, 0.25, "fraction of requests held out for Hot Recall, in (0, 1)");
ABSL_FLAG(int, window, 5, "lookahead window W (Eq. 9)");
ABSL_FLAG(double, gamma, 0.8, "decay gamma of the Eq. 9 targets, in (0, 1]");
ABSL_FLAG(int, prefetch_count, 20, "B of Hot Recall@B (capped at the number of experts)");
ABSL_FLAG(int, l_semantic, 1, "minimum pinned prefix depth (Eq. 10)");
ABSL_FLAG(std::string, copy_bandwidth, "16G", "host-to-device bytes/s of the cost model (K/M/G/T)");
ABSL_FLAG(int, max_new_tokens, 32, "default max_new_tokens per request");
ABSL_FLAG(int, max_context_tokens, 32768, "KV cache capacity, as the served engine's");
ABSL_FLAG(int, epochs, 60, "mlp-lookahead training epochs");
ABSL_FLAG(int, threads, 0, "CPU threads; 0 = all cores");
ABSL_FLAG(std::string, backend, "cpu", "engine backend for the traces: cpu | cuda | auto");
ABSL_FLAG(bool, synthetic_weights, false,
          "seeded random weights of --model's config shapes instead of its safetensors");
ABSL_FLAG(uint64_t, synthetic_seed, 0, "seed of --synthetic_weights");
ABSL_FLAG(std::string, synthetic_routing, "random",
          "how --synthetic_weights route: random | realistic (engine/model/synthetic_routing.md)");
ABSL_FLAG(double, temperature, 0,
          "0: greedy traces; > 0: sampled at this temperature, seeded per request");
ABSL_FLAG(uint64_t, seed, 0, "split and training seed");
ABSL_FLAG(double, skip_target_rate, 0,
          "MoDES expert skipping: calibrate alpha(l) (GMLG) and the text / visual thresholds "
          "(frontier search) for this share of routed experts skipped, in (0, 1); 0 = off");
ABSL_FLAG(int, skip_grid, 12, "expert skipping: candidate thresholds per modality (>= 2)");
ABSL_FLAG(double, commit_target_rate, 0,
          "commit miss policy: calibrate the router-certainty threshold below which this share "
          "of decode (token, MoE layer) pairs falls, in (0, 1); 0 = off");
ABSL_FLAG(std::string, out, "", "calibration profile to write (JSON; tensors beside it)");
ABSL_FLAG(std::string, json_out, "", "also write the JSON report here");

namespace {

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "vismoe-calibrate: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "vismoe-calibrate --model DIR --requests FILE.jsonl --budget 24G --out profile.json");
  vismoe::ExitOnHelpFlag(argc, argv, "calibrate_main");
  absl::ParseCommandLine(argc, argv);
  // stdout carries the JSON report only: the engine's logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("vismoe-calibrate"));
  vismoe::CalibratorOptions o;
  o.model_path = absl::GetFlag(FLAGS_model);
  if (o.model_path.empty()) return Fail(2, "--model is required");
  const std::string requests_path = absl::GetFlag(FLAGS_requests);
  if (requests_path.empty()) return Fail(2, "--requests is required");
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(2, "--out is required");
  // Checked before the (long) run rather than when saving.
  const std::filesystem::path out_dir = std::filesystem::absolute(out).parent_path();
  if (!std::filesystem::is_directory(out_dir)) {
    return Fail(2,
                absl::StrCat("--out=", out, ": directory ", out_dir.string(), " does not exist"));
  }
  absl::StatusOr<int64_t> budget = vismoe::ParseByteSize(absl::GetFlag(FLAGS_budget));
  if (!budget.ok() || *budget <= 0) {
    return Fail(2, absl::StrCat("--budget=", absl::GetFlag(FLAGS_budget),
                                ": expected bytes > 0 such as 24G or 512MiB"));
  }
  o.budget_bytes = *budget;
  absl::StatusOr<int64_t> bandwidth = vismoe::ParseByteSize(absl::GetFlag(FLAGS_copy_bandwidth));
  if (!bandwidth.ok() || *bandwidth <= 0) {
    return Fail(2, absl::StrCat("--copy_bandwidth=", absl::GetFlag(FLAGS_copy_bandwidth),
                                ": expected bytes/s > 0 such as 25G"));
  }
  o.copy_bandwidth = static_cast<double>(*bandwidth);
  o.held_out = absl::GetFlag(FLAGS_held_out);
  o.window = absl::GetFlag(FLAGS_window);
  o.gamma = static_cast<float>(absl::GetFlag(FLAGS_gamma));
  o.prefetch_count = absl::GetFlag(FLAGS_prefetch_count);
  o.l_semantic = absl::GetFlag(FLAGS_l_semantic);
  o.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
  o.num_threads = absl::GetFlag(FLAGS_threads);
  o.backend = absl::GetFlag(FLAGS_backend);
  o.synthetic_weights = absl::GetFlag(FLAGS_synthetic_weights);
  o.synthetic_seed = absl::GetFlag(FLAGS_synthetic_seed);
  o.synthetic_routing = absl::GetFlag(FLAGS_synthetic_routing);
  o.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  if (!(o.temperature >= 0) || o.temperature > 100) {
    return Fail(2, "--temperature must be in [0, 100]");
  }
  o.seed = absl::GetFlag(FLAGS_seed);
  o.skip_target_rate = absl::GetFlag(FLAGS_skip_target_rate);
  o.skip_grid = absl::GetFlag(FLAGS_skip_grid);
  o.commit_target_rate = absl::GetFlag(FLAGS_commit_target_rate);
  o.train.epochs = absl::GetFlag(FLAGS_epochs);
  if (o.train.epochs < 1) return Fail(2, "--epochs must be >= 1");
  o.progress = &std::cerr;

  auto loaded = vismoe::bench::LoadRequestSet(requests_path, absl::GetFlag(FLAGS_max_new_tokens));
  if (!loaded.ok()) return Fail(2, std::string(loaded.status().message()));
  std::vector<vismoe::CalibrationRequest> requests;
  for (size_t i = 0; i < loaded->size(); ++i) {
    requests.push_back({absl::StrCat("request ", i + 1), (*loaded)[i].ToGenerateRequest()});
  }
  std::cerr << "calibrate: " << requests.size() << " requests from " << requests_path << std::endl;

  auto report = vismoe::RunCalibration(o, requests);
  if (!report.ok()) {
    const bool input = report.status().code() == absl::StatusCode::kInvalidArgument ||
                       report.status().code() == absl::StatusCode::kNotFound;
    return Fail(input ? 2 : 1, std::string(report.status().message()));
  }
  if (absl::Status st = report->profile.Save(out); !st.ok()) {
    return Fail(1, std::string(st.message()));
  }
  std::cerr << "calibrate: wrote " << out << std::endl;
  const std::string json = report->ToJson();
  std::cout << json << std::endl;
  if (const std::string path = absl::GetFlag(FLAGS_json_out); !path.empty()) {
    std::ofstream f(path);
    f << json << "\n";
    if (!f) return Fail(1, "cannot write --json_out=" + path);
  }
  return 0;
}
