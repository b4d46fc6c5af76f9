#include "engine/bench/report.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/backend/backend.h"
#include "engine/backends/registry.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/offload/device_allocator.h"
#include "engine/offload/host_expert_store.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/transfer_engine.h"

namespace vismoe::bench {

int64_t ExpertBytes(const std::string& model_path, bool synthetic_weights) {
  auto config = ModelConfig::Load(model_path);
  if (synthetic_weights) {
    if (!config.ok()) return 0;
    auto sizes = MeasureSynthetic(*config);  // no allocation
    return sizes.ok() ? sizes->expert_bytes : 0;
  }
  auto ckpt = Checkpoint::Open(model_path);
  if (!config.ok() || !ckpt.ok()) return 0;
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::Experts(*config));
  return sizes.ok() ? sizes->expert_bytes : 0;
}

namespace {

// Memory from an allocator, freed on scope exit.
template <typename Allocator>
struct Block {
  Allocator* allocator;
  size_t bytes;
  void* p;
  Block(Allocator* a, size_t n) : allocator(a), bytes(n), p(a->Allocate(n)) {}
  ~Block() {
    if (p != nullptr) allocator->Free(p, bytes);
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
};

}  // namespace

double MeasureCopyBandwidth(const std::string& backend_name, double throttle, int64_t block_bytes) {
  absl::StatusOr<BackendChoice> choice = ChooseBackend(backend_name);
  if (!choice.ok()) return 0;
  absl::StatusOr<OffloadDeviceParts> parts = choice->backend->CreateOffloadDevice(BackendOptions{});
  if (!parts.ok()) return 0;
  HostAllocator* host = parts->host_allocator != nullptr ? parts->host_allocator.get()
                                                         : AlignedHostAllocator::Default();
  DeviceAllocator* device = parts->device_allocator != nullptr ? parts->device_allocator.get()
                                                               : HeapDeviceAllocator::Default();
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(block_bytes, 4096));
  constexpr int kCopies = 16;
  Block<HostAllocator> src(host, bytes);
  Block<DeviceAllocator> dst(device, bytes * kCopies);
  if (src.p == nullptr || dst.p == nullptr) return 0;
  std::memset(src.p, 1, bytes);
  // The throttle is the CPU copy engine's; a device copy backend runs at its own rate.
  TransferEngine te(
      TransferEngine::Options{parts->copy != nullptr ? 0 : throttle, false, parts->copy.get()});
  for (int i = 0; i < kCopies; ++i) {
    TransferEngine::Request r;
    r.src = src.p;
    r.dst = static_cast<char*>(dst.p) + i * bytes;
    r.bytes = bytes;
    te.Submit(std::move(r));
  }
  te.WaitIdle();
  const double bw = te.MeasuredBandwidth();
  te.Shutdown();
  return bw;
}

int64_t CheckpointBytes(const std::string& model_path, bool synthetic_weights) {
  if (synthetic_weights) {
    auto config = ModelConfig::Load(model_path);
    if (!config.ok()) return 0;
    auto sizes = MeasureSynthetic(*config);  // no allocation
    return sizes.ok() ? sizes->total_bytes : 0;
  }
  std::error_code ec;
  int64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(model_path, ec)) {
    if (entry.path().extension() != ".safetensors") continue;
    const auto size = entry.file_size(ec);
    if (!ec) total += static_cast<int64_t>(size);
  }
  return total;
}

int64_t PeakRssBytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

nlohmann::json SummaryJson(const RunSummary& s, int64_t expert_bytes, double measured_bandwidth) {
  // Integer counters stay integers for a single run; means over runs are doubles.
  auto per_run = [&](double sum) -> nlohmann::json {
    if (s.runs == 1) return static_cast<uint64_t>(sum);
    return s.PerRun(sum);
  };
  const OffloadStats& o = s.offload;
  const uint64_t missed = o.prefetch_needed - o.prefetch_recalled;
  // Misses computed on the host were not copied: they leave the copy floor.
  const uint64_t copied_misses = missed - std::min(missed, o.experts_host_computed);
  const double missed_per_run = s.PerRun(static_cast<double>(copied_misses));
  const double missed_bytes = missed_per_run * static_cast<double>(expert_bytes);
  const double total = s.PerRun(s.total_seconds);
  const double stall = s.PerRun(o.stall_seconds);
  const double compute = std::max(0.0, total - stall);
  const double copy_floor = measured_bandwidth > 0 ? missed_bytes / measured_bandwidth : 0;
  // Experts copied per request and offloaded layer (MELINOE's transfers per layer).
  auto per_layer = [&](uint64_t transfers) {
    const double n = static_cast<double>(s.request_count()) * s.phase_hits.offloaded_layers;
    return n > 0 ? static_cast<double>(transfers) / n : 0.0;
  };
  return {
      {"runs", s.runs},
      {"requests", s.requests_per_run},
      {"prompt_tokens", per_run(static_cast<double>(s.prompt_tokens))},
      {"completion_tokens", per_run(static_cast<double>(s.completion_tokens))},
      {"visual_tokens_before", per_run(static_cast<double>(s.visual_tokens_before))},
      {"visual_tokens_after", per_run(static_cast<double>(s.visual_tokens_after))},
      {"ttft_seconds_mean", s.MeanTtft()},
      {"tpot_seconds_mean", s.MeanTpot()},
      {"request_seconds_mean", s.MeanRequestSeconds()},
      {"total_seconds", total},
      {"cache_queries", per_run(static_cast<double>(o.cache_queries))},
      {"cache_hits", per_run(static_cast<double>(o.cache_hits))},
      {"hit_ratio", s.HitRatio()},
      {"prefill_cache_queries", per_run(static_cast<double>(s.phase_hits.prefill.queries))},
      {"prefill_cache_hits", per_run(static_cast<double>(s.phase_hits.prefill.hits))},
      {"prefill_hit_ratio", s.phase_hits.prefill.HitRatio()},
      {"decode_cache_queries", per_run(static_cast<double>(s.phase_hits.decode.queries))},
      {"decode_cache_hits", per_run(static_cast<double>(s.phase_hits.decode.hits))},
      {"decode_hit_ratio", s.phase_hits.decode.HitRatio()},
      {"prefetch_needed", per_run(static_cast<double>(o.prefetch_needed))},
      {"prefetch_recalled", per_run(static_cast<double>(o.prefetch_recalled))},
      {"hot_recall", s.HotRecall()},
      {"prefetch_issued", per_run(static_cast<double>(o.prefetch_issued))},
      {"prefetch_used", per_run(static_cast<double>(o.prefetch_used))},
      {"bytes_h2d", per_run(static_cast<double>(o.bytes_h2d))},
      {"stall_seconds", stall},
      {"expert_bytes", expert_bytes},
      {"missed_experts", per_run(static_cast<double>(missed))},
      {"experts_host_computed", per_run(static_cast<double>(o.experts_host_computed))},
      {"bytes_not_copied", per_run(static_cast<double>(o.bytes_not_copied))},
      {"missed_bytes", missed_bytes},
      {"copy_bandwidth_measured_bytes_per_s", measured_bandwidth},
      {"compute_seconds", compute},
      {"bound_seconds", std::max(compute, copy_floor)},
      {"preload_issued", per_run(static_cast<double>(o.preload_issued))},
      {"preload_used", per_run(static_cast<double>(o.preload_used))},
      {"preload_kept_lookups", per_run(static_cast<double>(o.preload_kept_lookups))},
      {"decode_offloaded_lookups", per_run(static_cast<double>(s.phase_hits.decode.offloaded))},
      {"prefill_transfers", per_run(static_cast<double>(s.phase_hits.prefill.transfers))},
      {"decode_transfers", per_run(static_cast<double>(s.phase_hits.decode.transfers))},
      {"preload_transfers", per_run(static_cast<double>(s.phase_hits.preload_transfers))},
      {"offloaded_layers", s.phase_hits.offloaded_layers},
      {"transfers_per_layer",
       per_layer(s.phase_hits.prefill.transfers + s.phase_hits.decode.transfers +
                 s.phase_hits.preload_transfers)},
      {"decode_transfers_per_layer",
       per_layer(s.phase_hits.decode.transfers + s.phase_hits.preload_transfers)},
      {"decode_transfers_per_token",
       s.completion_tokens > 0 ? static_cast<double>(s.phase_hits.decode.transfers +
                                                     s.phase_hits.preload_transfers) /
                                     static_cast<double>(s.completion_tokens)
                               : 0.0},
      {"experts_routed", per_run(static_cast<double>(s.skipping.total_routed()))},
      {"experts_skipped_text", per_run(static_cast<double>(s.skipping.skipped[0]))},
      {"experts_skipped_visual", per_run(static_cast<double>(s.skipping.skipped[1]))},
      {"experts_skipped_share",
       s.skipping.total_routed() == 0
           ? 0.0
           : static_cast<double>(s.skipping.total_skipped()) / s.skipping.total_routed()},
      {"decode_missed_bytes",
       per_run(static_cast<double>(s.phase_hits.decode.queries - s.phase_hits.decode.hits) *
               static_cast<double>(expert_bytes))},
      {"commit_tokens", per_run(static_cast<double>(s.commit.tokens))},
      {"commit_uncertain_tokens", per_run(static_cast<double>(s.commit.uncertain_tokens))},
      {"experts_committed_router", per_run(static_cast<double>(s.commit.committed_router))},
      {"experts_committed_substitute", per_run(static_cast<double>(s.commit.committed_substitute))},
      {"commit_fetched", per_run(static_cast<double>(s.commit.fetched))},
      {"commit_owa_tokens", per_run(static_cast<double>(s.commit.owa_tokens))},
      {"speculative_executed", per_run(static_cast<double>(s.speculative.executed))},
      {"speculative_kept", per_run(static_cast<double>(s.speculative.kept))},
      {"speculative_discarded", per_run(static_cast<double>(s.speculative.discarded))},
      {"speculative_compute_seconds", s.PerRun(s.speculative.compute_seconds)},
      {"speculative_kept_seconds", s.PerRun(s.speculative.kept_seconds)},
      {"speculative_saved_seconds", s.PerRun(s.speculative.saved_seconds)},
      {"speculative_bound_seconds", s.PerRun(s.speculative.bound_seconds)},
      {"speculative_wait_seconds", s.PerRun(s.speculative.wait_seconds)},
      {"speculative_overrun_seconds", s.PerRun(s.speculative.overrun_seconds)},
      {"per_request", s.per_request}};
}

}  // namespace vismoe::bench
