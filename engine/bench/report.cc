#include "engine/bench/report.h"

#include <sys/resource.h>

#include <cstring>
#include <filesystem>

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/transfer_engine.h"

#ifdef VISMOE_HAVE_CUDA
#include "engine/device/cuda/cuda_copy_backend.h"
#include "engine/device/cuda/device.h"
#endif

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
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  return sizes.ok() ? sizes->expert_bytes : 0;
}

double MeasureCopyBandwidth(double throttle, int64_t block_bytes, bool cuda) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(block_bytes, 4096));
  constexpr int kCopies = 16;
  if (cuda) {
#ifdef VISMOE_HAVE_CUDA
    auto backend = cuda::CudaCopyBackend::Create(0);
    auto src = cuda::PinnedHostBuffer::Allocate(bytes);
    auto dst = cuda::DeviceBuffer::Allocate(bytes * kCopies);
    if (!backend.ok() || !src.ok() || !dst.ok()) return 0;
    std::memset(src->data(), 1, bytes);
    TransferEngine te(TransferEngine::Options{0, false, backend->get()});
    for (int i = 0; i < kCopies; ++i) {
      TransferEngine::Request r;
      r.src = src->data();
      r.dst = dst->as<char>() + i * bytes;
      r.bytes = bytes;
      te.Submit(std::move(r));
    }
    te.WaitIdle();
    const double bw = te.MeasuredBandwidth();
    te.Shutdown();
    return bw;
#else
    return 0;
#endif
  }
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

int64_t CheckpointBytes(const std::string& model_path) {
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
  return {{"runs", s.runs},
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
          {"experts_routed", per_run(static_cast<double>(s.skipping.total_routed()))},
          {"experts_skipped_text", per_run(static_cast<double>(s.skipping.skipped[0]))},
          {"experts_skipped_visual", per_run(static_cast<double>(s.skipping.skipped[1]))},
          {"experts_skipped_share",
           s.skipping.total_routed() == 0
               ? 0.0
               : static_cast<double>(s.skipping.total_skipped()) / s.skipping.total_routed()},
          {"per_request", s.per_request}};
}

}  // namespace vismoe::bench
