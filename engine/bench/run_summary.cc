#include "engine/bench/run_summary.h"

#include "absl/strings/str_cat.h"

namespace vismoe::bench {
namespace {

double Ratio(uint64_t num, uint64_t den) {
  return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 1.0;
}

// What a counter added between `before` and `after`.
PhaseHitTotals Since(const PhaseHitTotals& before, const PhaseHitTotals& after) {
  auto diff = [](const PhaseHits& b, const PhaseHits& a) {
    return PhaseHits{a.queries - b.queries, a.hits - b.hits, a.transfers - b.transfers,
                     a.offloaded - b.offloaded};
  };
  return {diff(before.prefill, after.prefill), diff(before.decode, after.decode),
          after.preload_transfers - before.preload_transfers, after.offloaded_layers};
}

}  // namespace

double RunSummary::MeanTtft() const {
  return request_count() > 0 ? ttft_seconds / static_cast<double>(request_count()) : 0.0;
}
double RunSummary::MeanTpot() const {
  return tpot_requests > 0 ? tpot_seconds / tpot_requests : 0.0;
}
double RunSummary::MeanRequestSeconds() const {
  return request_count() > 0 ? total_seconds / static_cast<double>(request_count()) : 0.0;
}
double RunSummary::HitRatio() const { return Ratio(offload.cache_hits, offload.cache_queries); }
double RunSummary::HotRecall() const {
  return Ratio(offload.prefetch_recalled, offload.prefetch_needed);
}

absl::StatusOr<RunSummary> RunRequestSet(Engine& engine, const std::vector<BenchRequest>& requests,
                                         int repeat, const PhaseHitCounter* phases) {
  const PhaseHitTotals before = phases != nullptr ? phases->Totals() : PhaseHitTotals{};
  RunSummary s;
  s.runs = repeat;
  s.requests_per_run = static_cast<int>(requests.size());
  for (int run = 0; run < repeat; ++run) {
    for (size_t i = 0; i < requests.size(); ++i) {
      auto r = engine.Generate(requests[i].ToGenerateRequest(), {});
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat("run ", run, " request ", i, ": ", r.status().message()));
      }
      const OffloadStats& o = r->offload;
      s.offload.Add(o);
      s.ttft_seconds += r->timings.ttft_seconds;
      if (r->usage.completion_tokens > 1) {
        s.tpot_seconds += r->timings.tpot_seconds;
        ++s.tpot_requests;
      }
      s.total_seconds += r->timings.total_seconds;
      s.prompt_tokens += r->usage.prompt_tokens;
      s.completion_tokens += r->usage.completion_tokens;
      s.skipping.Add(r->expert_skipping);
      s.commit.Add(r->commit);
      s.speculative.Add(r->speculative);
      s.visual_tokens_before += r->usage.visual_tokens_before;
      s.visual_tokens_after += r->usage.visual_tokens_after;
      s.per_request.push_back({{"run", run},
                               {"index", i},
                               {"images", requests[i].images.size()},
                               {"prompt_tokens", r->usage.prompt_tokens},
                               {"visual_tokens_before", r->usage.visual_tokens_before},
                               {"visual_tokens_after", r->usage.visual_tokens_after},
                               {"completion_tokens", r->usage.completion_tokens},
                               {"text", r->text},
                               {"token_ids", r->token_ids},
                               {"ttft_seconds", r->timings.ttft_seconds},
                               {"tpot_seconds", r->timings.tpot_seconds},
                               {"total_seconds", r->timings.total_seconds},
                               {"cache_queries", o.cache_queries},
                               {"cache_hits", o.cache_hits},
                               {"prefetch_needed", o.prefetch_needed},
                               {"prefetch_recalled", o.prefetch_recalled},
                               {"bytes_h2d", o.bytes_h2d},
                               {"stall_seconds", o.stall_seconds},
                               {"preload_issued", o.preload_issued},
                               {"preload_used", o.preload_used},
                               {"preload_kept_lookups", o.preload_kept_lookups},
                               {"experts_host_computed", o.experts_host_computed},
                               {"bytes_not_copied", o.bytes_not_copied},
                               {"commit_uncertain_tokens", r->commit.uncertain_tokens},
                               {"experts_committed_router", r->commit.committed_router},
                               {"experts_committed_substitute", r->commit.committed_substitute},
                               {"speculative_kept", r->speculative.kept},
                               {"speculative_discarded", r->speculative.discarded}});
    }
  }
  if (phases != nullptr) s.phase_hits = Since(before, phases->Totals());
  return s;
}

}  // namespace vismoe::bench
