#include "engine/bench/ablation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace vismoe::bench {
namespace {

double Normalised(const std::vector<AblationRow>& rows, double v) {
  const double base = rows.front().summary.MeanRequestSeconds();
  return base > 0 ? 100.0 * v / base : 0.0;
}

}  // namespace

std::vector<AblationRowConfig> AblationConfigs(const EngineOptions& flags, double keep_ratio,
                                               const std::string& predictor) {
  EngineOptions base = flags;
  base.compression = TokenCompressorOptions{};  // kind "none"
  base.offload.prefetch = "none";
  base.offload.eviction = "lru";
  base.calibration_profile.clear();
  base.offload.miss_policy = "fetch";  // VisMMOE's rows: commit needs a predictor, which base lacks
  base.speculative_execution = false;  // VisMMOE's rows compute what the router chose

  EngineOptions compression = base;
  compression.compression.kind = "affinity";
  compression.compression.beta = keep_ratio;
  compression.compression.alpha = std::min(compression.compression.alpha, keep_ratio);

  EngineOptions prefetch = compression;
  prefetch.offload.prefetch = predictor;
  prefetch.calibration_profile = flags.calibration_profile;

  EngineOptions full = prefetch;
  full.offload.eviction = "guarded";
  const bool eq10 = !flags.calibration_profile.empty();
  if (eq10) full.offload.pinned_layers = -1;

  return {
      {"base", "no compression, no prefetch, LRU eviction", base},
      {"+compression", absl::StrCat("affinity compression, keep ratio ", keep_ratio), compression},
      {"+prediction & prefetching",
       absl::StrCat("+ ", predictor, " prefetch (B=", flags.offload.prefetch_count,
                    ", W=", flags.offload.lookahead_window, ")"),
       prefetch},
      {"full",
       absl::StrCat("+ guarded eviction",
                    eq10 ? ", L_pinned by Eq. 10 from the calibration profile" : ""),
       full},
  };
}

absl::StatusOr<std::vector<AblationRow>> RunAblation(const std::vector<AblationRowConfig>& configs,
                                                     const std::vector<BenchRequest>& requests,
                                                     int repeat) {
  std::vector<AblationRow> rows;
  for (const AblationRowConfig& c : configs) {
    spdlog::info("ablation row \"{}\": {}", c.name, c.turns_on);
    PhaseHitCounter phases;
    EngineOptions options = c.options;
    options.stats = &phases;
    auto engine = Engine::Create(options);
    if (!engine.ok()) {
      return absl::Status(engine.status().code(), absl::StrCat("ablation row \"", c.name,
                                                               "\": ", engine.status().message()));
    }
    auto summary = RunRequestSet(**engine, requests, repeat, &phases);
    if (!summary.ok()) {
      return absl::Status(
          summary.status().code(),
          absl::StrCat("ablation row \"", c.name, "\": ", summary.status().message()));
    }
    AblationRow row;
    row.config = c;
    row.summary = *std::move(summary);
    row.pinned_layers = c.options.offload.pinned_layers;
    rows.push_back(std::move(row));
  }
  return rows;
}

void PrintAblationTable(const std::vector<AblationRow>& rows, std::FILE* out) {
  if (rows.empty()) return;
  std::fprintf(out, "%-27s %10s %7s %9s %9s %6s %6s %12s %9s %13s\n", "row", "e2e s/req", "norm",
               "TTFT s", "TPOT s", "hit", "recall", "bytes moved", "stall s", "visual kept");
  for (const AblationRow& r : rows) {
    const RunSummary& s = r.summary;
    const std::string kept = absl::StrCat(s.PerRun(static_cast<double>(s.visual_tokens_after)), "/",
                                          s.PerRun(static_cast<double>(s.visual_tokens_before)));
    std::fprintf(out, "%-27s %10.4f %6.1f%% %9.4f %9.4f %6.3f %6.3f %12.0f %9.4f %13s\n",
                 r.config.name.c_str(), s.MeanRequestSeconds(),
                 Normalised(rows, s.MeanRequestSeconds()), s.MeanTtft(), s.MeanTpot(), s.HitRatio(),
                 s.HotRecall(), s.PerRun(static_cast<double>(s.offload.bytes_h2d)),
                 s.PerRun(s.offload.stall_seconds), kept.c_str());
  }
}

nlohmann::json AblationJson(const std::vector<AblationRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const AblationRow& r : rows) {
    const RunSummary& s = r.summary;
    const EngineOptions& o = r.config.options;
    out.push_back({{"name", r.config.name},
                   {"turns_on", r.config.turns_on},
                   {"token_compressor", o.compression.kind},
                   {"keep_ratio", o.compression.kind == "none" ? 1.0 : o.compression.beta},
                   {"prefetch", o.offload.prefetch},
                   {"eviction", o.offload.eviction},
                   {"pinned_layers_flag", r.pinned_layers},
                   {"request_seconds_mean", s.MeanRequestSeconds()},
                   {"normalised_percent", Normalised(rows, s.MeanRequestSeconds())},
                   {"ttft_seconds_mean", s.MeanTtft()},
                   {"tpot_seconds_mean", s.MeanTpot()},
                   {"hit_ratio", s.HitRatio()},
                   {"decode_hit_ratio", s.phase_hits.decode.HitRatio()},
                   {"hot_recall", s.HotRecall()},
                   {"prefetch_issued", s.PerRun(static_cast<double>(s.offload.prefetch_issued))},
                   {"prefetch_used", s.PerRun(static_cast<double>(s.offload.prefetch_used))},
                   {"bytes_h2d", s.PerRun(static_cast<double>(s.offload.bytes_h2d))},
                   {"stall_seconds", s.PerRun(s.offload.stall_seconds)},
                   {"visual_tokens_before", s.PerRun(static_cast<double>(s.visual_tokens_before))},
                   {"visual_tokens_after", s.PerRun(static_cast<double>(s.visual_tokens_after))}});
  }
  return out;
}

}  // namespace vismoe::bench
