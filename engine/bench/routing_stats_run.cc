#include "engine/bench/routing_stats_run.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/calibrate/routing_stats.h"

namespace vismoe::bench {

absl::StatusOr<nlohmann::json> RunRoutingStats(Engine& engine,
                                               const std::vector<BenchRequest>& requests,
                                               float temperature) {
  std::vector<std::unique_ptr<RoutingStatsRecorder>> recorders;
  // Per part, each request's layer sequences (decoder layer order).
  using ByRequest = std::vector<std::vector<const LayerSequence*>>;
  ByRequest decode, prefill_text, prefill_image;
  auto pointers = [](const std::vector<LayerSequence>& layers) {
    std::vector<const LayerSequence*> out;
    for (const LayerSequence& s : layers) out.push_back(&s);
    return out;
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerateRequest req = requests[i].ToGenerateRequest();
    req.sampling.temperature = temperature;
    req.sampling.seed = 1000 + i;
    recorders.push_back(std::make_unique<RoutingStatsRecorder>());
    GenerateCallbacks cb;
    cb.router_observer = recorders.back().get();
    absl::StatusOr<GenerateResult> r = engine.Generate(req, cb);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("routing stats, request ", i, ": ", r.status().message()));
    }
    decode.push_back(pointers(recorders.back()->decode()));
    (requests[i].images.empty() ? prefill_text : prefill_image)
        .push_back(pointers(recorders.back()->prefill()));
  }
  RoutingStatsOptions o;
  o.num_experts = engine.info().num_experts;
  nlohmann::json out = {{"temperature", temperature}};
  auto add = [&](const char* name, const ByRequest& by_request) {
    std::vector<const LayerSequence*> all;
    for (const auto& layers : by_request) all.insert(all.end(), layers.begin(), layers.end());
    const RoutingStats s = ComputeRoutingStats(all, o, by_request);
    if (s.sequences > 0) out[name] = RoutingStatsJson(s);
  };
  add("decode", decode);
  add("prefill_text", prefill_text);
  add("prefill_image", prefill_image);
  return out;
}

std::string RoutingStatsTable(const nlohmann::json& stats) {
  std::string out = absl::StrFormat(
      "routing statistics (temperature %.2f)   repeat  reuse med  <=1    <=8    LRU@40%%  "
      "warm-up  Belady@40%%  distinct/64  shared LRU/Belady@40%%\n",
      stats.value("temperature", 0.0));
  for (const char* part : {"decode", "prefill_text", "prefill_image"}) {
    if (!stats.contains(part)) continue;
    const nlohmann::json& s = stats[part];
    double lru = 0, warm = 0, belady = 0, shared_lru = 0, shared_belady = 0;
    for (const auto& c : s["cache"]) {
      if (std::abs(c["fraction"].get<double>() - 0.4) < 1e-9) {
        lru = c["lru_hit"], warm = c["lru_warmup_hit"], belady = c["belady_hit"];
        shared_lru = c["shared_lru_hit"], shared_belady = c["shared_belady_hit"];
      }
    }
    absl::StrAppendFormat(
        &out, "  %-38s %6.3f  %9.1f  %5.3f  %5.3f  %7.3f  %7.3f  %10.3f  %11.1f  %5.3f/%5.3f\n",
        part, s["next_token_repeat"].get<double>(), s["reuse_median"].get<double>(),
        s["reuse_within_1"].get<double>(), s["reuse_within_8"].get<double>(), lru, warm, belady,
        s["distinct_per_window"].get<double>(), shared_lru, shared_belady);
  }
  return out;
}

}  // namespace vismoe::bench
