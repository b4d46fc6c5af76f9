// ServerMetrics: the daemon's Prometheus metrics (names fixed in DESIGN.md,
// prefix vismoe_) and, optionally, the HTTP exposer that serves /metrics.
//
// It is the server's adapter of the engine's StatsSink: the engine reports
// expert-cache, prefetch, transfer and policy events through the StatsSink
// methods; the gRPC service reports per-request outcomes through
// OnRequestFinished / ObserveResult / ObserveImageDecode and the admission
// gauges. Exported series:
//
//   counters   vismoe_expert_cache_queries_total{phase,layer}
//              vismoe_expert_cache_hits_total{phase,layer}
//              vismoe_prefetch_needed_total, vismoe_prefetch_recalled_total
//              vismoe_prefetch_issued_total, vismoe_prefetch_used_total
//              vismoe_preloaded_experts_total, vismoe_preloaded_experts_used_total
//              vismoe_expert_bytes_h2d_total, vismoe_transfer_stall_seconds_total
//              vismoe_requests_total{api,status}, vismoe_generated_tokens_total
//              vismoe_prompt_tokens_total{modality="text"|"image"}
//              vismoe_visual_tokens_pruned_total
//              vismoe_experts_skipped_total{modality="text"|"image"}
//              vismoe_experts_committed_total{choice="router"|"substitute"}
//              vismoe_experts_host_computed_total, vismoe_expert_bytes_not_copied_total
//              vismoe_speculative_executions_total{kept="true"|"false"}
//   gauges     vismoe_expert_cache_hit_ratio, vismoe_prefetch_recall  (sliding window)
//              vismoe_gpu_memory_bytes{region}, vismoe_slab_cache_slots{state}
//              vismoe_queue_depth, vismoe_running_requests
//   histograms vismoe_time_to_first_token_seconds{api}, vismoe_time_per_output_token_seconds{api},
//              vismoe_request_duration_seconds{api}, vismoe_image_decode_seconds,
//              vismoe_compression_seconds, vismoe_predictor_seconds
//
// Label values: phase is "prefill"|"decode"; layer is the decoder layer index
// in decimal; state is "free"|"required"|"speculative"|"expired"; region is
// whatever the engine reports ("resident", "pinned_prefix", "slab_cache",
// "activations", "kv_cache"); api is the front end a request came through,
// "grpc" or "http" (the OpenAI-compatible API); status is "ok" for a
// successful request, else the
// lower-case gRPC code name ("invalid_argument", "resource_exhausted",
// "cancelled", "deadline_exceeded", "internal", ...). Dashboards and alerts
// rely on status="ok" meaning success.
//
// The two convenience gauges are computed at scrape time over a sliding time
// window (Options::window, default the last 60 s, in 1-second buckets): hits /
// queries and recalled / needed of the events inside the window. With no
// events in the window they read NaN (undefined), never a fake 0 or 1.
//
// Thread safety: every method may be called concurrently from any thread
// (engine worker threads, gRPC handlers, the exposer's HTTP threads).
// Ownership: owns its registry and exposer; the exposer stops serving in the
// destructor. Not copyable.
#ifndef VISMOE_SERVER_METRICS_H_
#define VISMOE_SERVER_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/api/request.h"
#include "engine/api/stats_sink.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace vismoe {

class SlidingWindowRatios;  // metrics.cc

class ServerMetrics : public StatsSink {
 public:
  // The front end a request came through: the `api` label.
  enum class Api { kGrpc, kHttp };
  static const char* ApiLabel(Api api) { return api == Api::kGrpc ? "grpc" : "http"; }

  // The /metrics exposer's worker threads, and how long it waits for a
  // client's request (or a write) before dropping the connection, so idle or
  // slow connections cannot starve scrapes.
  static constexpr int kExposerThreads = 8;
  static constexpr int kExposerReadTimeoutMs = 2000;

  struct Options {
    // "host:port" for the HTTP exposer ("0.0.0.0:9464"); "" = no exposer
    // (metrics are still collected and Serialize() works); port 0 = any free.
    std::string listen_address;
    // Width of the sliding window of the two convenience ratio gauges.
    // REQUIRES: a whole number of seconds, >= 1 s.
    absl::Duration window = absl::Seconds(60);
    // Time source of the sliding window; tests inject a fake. Null = absl::Now.
    std::function<absl::Time()> clock;
  };

  // Fails with InvalidArgument on a malformed address or window, Unavailable
  // when the exposer cannot bind.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(const std::string& listen_address);
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(const Options& options);

  ~ServerMetrics() override;
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // ---- request-level (called by the gRPC service and the HTTP API) ----
  // vismoe_requests_total{api,status=status_label}; see the label convention
  // above.
  void OnRequestFinished(Api api, absl::string_view status_label);
  // TTFT / TPOT / duration histograms and token counters of one finished
  // request. TTFT is observed only if a token was produced, TPOT only if two.
  // The per-request offload stats are NOT added here: the engine reports
  // those live through the StatsSink methods.
  void ObserveResult(Api api, const GenerateResult& r);
  void ObserveImageDecode(double seconds);
  void SetQueueDepth(int64_t n);
  void SetRunningRequests(int64_t n);

  // Optional: pre-creates zero-valued expert-cache series for layers
  // [0, num_layers) in both phases, so per-layer panels show every layer from
  // the start. Without it only layer 0 is pre-created; others appear on use.
  void DeclareLayers(int num_layers);

  // ---- StatsSink (called by the engine) ----
  void OnExpertQuery(Phase phase, int layer, bool hit) override;
  void OnPrefetchNeeded(int layer, bool recalled) override;
  void OnPrefetchIssued(uint64_t count) override;
  void OnPrefetchUsed(uint64_t count) override;
  void OnPreloadIssued(uint64_t count) override;
  void OnPreloadUsed(uint64_t count) override;
  void OnBytesHostToDevice(uint64_t bytes) override;
  void OnTransferStall(double seconds) override;
  void OnExpertsHostComputed(uint64_t count, uint64_t bytes_not_copied) override;
  void OnVisualTokensPruned(uint64_t count) override;
  void OnCompressionTime(double seconds) override;
  void OnPredictorTime(double seconds) override;
  void OnExpertsSkipped(TokenModality modality, uint64_t count) override;
  void OnExpertsCommitted(uint64_t router, uint64_t substitute) override;
  void OnSpeculativeExecutions(uint64_t kept, uint64_t discarded) override;
  void SetSlotCount(SlotState state, int64_t count) override;
  void SetMemoryRegion(std::string_view region, int64_t bytes) override;
  void OnSchedulerStep(int sequences, int64_t tokens) override;
  void SetSequences(int64_t running, int64_t waiting) override;
  void SetKvBlocks(int64_t used, int64_t total) override;
  void OnPreemption() override;

  // TCP port the exposer listens on (resolved when 0 was asked); 0 without
  // an exposer.
  int metrics_port() const { return metrics_port_; }
  // Everything /metrics would serve, in the Prometheus text format.
  std::string Serialize() const;

 private:
  struct CachePair {
    prometheus::Counter* queries = nullptr;
    prometheus::Counter* hits = nullptr;
  };

  explicit ServerMetrics(const Options& options);
  // REQUIRES: layer >= 0.
  CachePair& CacheSeries(Phase phase, int layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The engine's batch scheduler: sequences, KV blocks, preemptions, per-step
  // histograms.
  void RegisterSchedulerMetrics(prometheus::Registry& r);

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<SlidingWindowRatios> window_;

  prometheus::Family<prometheus::Counter>* cache_queries_ = nullptr;
  prometheus::Family<prometheus::Counter>* cache_hits_ = nullptr;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  // Per-API request latency histograms, indexed by Api.
  struct LatencySeries {
    prometheus::Histogram* ttft = nullptr;
    prometheus::Histogram* tpot = nullptr;
    prometheus::Histogram* duration = nullptr;
  };
  LatencySeries latency_[2];
  prometheus::Family<prometheus::Gauge>* gpu_memory_ = nullptr;

  prometheus::Counter* prefetch_needed_ = nullptr;
  prometheus::Counter* prefetch_recalled_ = nullptr;
  prometheus::Counter* prefetch_issued_ = nullptr;
  prometheus::Counter* prefetch_used_ = nullptr;
  prometheus::Counter* preloaded_ = nullptr;
  prometheus::Counter* preloaded_used_ = nullptr;
  prometheus::Counter* bytes_h2d_ = nullptr;
  prometheus::Counter* stall_seconds_ = nullptr;
  prometheus::Counter* host_computed_ = nullptr;
  prometheus::Counter* bytes_not_copied_ = nullptr;
  prometheus::Counter* generated_tokens_ = nullptr;
  prometheus::Counter* prompt_tokens_text_ = nullptr;
  prometheus::Counter* prompt_tokens_image_ = nullptr;
  prometheus::Counter* visual_pruned_ = nullptr;
  prometheus::Counter* skipped_[2] = {};  // indexed by TokenModality
  prometheus::Counter* committed_router_ = nullptr;
  prometheus::Counter* committed_substitute_ = nullptr;
  prometheus::Counter* speculative_kept_ = nullptr;
  prometheus::Counter* speculative_discarded_ = nullptr;
  prometheus::Gauge* queue_depth_ = nullptr;
  prometheus::Gauge* running_requests_ = nullptr;
  prometheus::Gauge* sequences_running_ = nullptr;
  prometheus::Gauge* sequences_waiting_ = nullptr;
  prometheus::Gauge* kv_blocks_used_ = nullptr;
  prometheus::Gauge* kv_blocks_free_ = nullptr;
  prometheus::Counter* preemptions_ = nullptr;
  prometheus::Histogram* batch_size_ = nullptr;
  prometheus::Histogram* step_tokens_ = nullptr;
  prometheus::Gauge* slots_[4] = {};  // indexed by SlotState
  prometheus::Histogram* image_decode_ = nullptr;
  prometheus::Histogram* compression_ = nullptr;
  prometheus::Histogram* predictor_ = nullptr;

  // Label children created on first use. prometheus-cpp families are
  // thread-safe but Add() hashes the label set on every call; these caches
  // keep the hot path (one call per expert lookup) to an index under mu_.
  mutable absl::Mutex mu_;
  std::vector<CachePair> cache_by_layer_[2] ABSL_GUARDED_BY(mu_);  // [phase][layer]

  // Declared last: destroyed first, so no scrape runs during teardown.
  std::unique_ptr<prometheus::Exposer> exposer_;
  int metrics_port_ = 0;
};

}  // namespace vismoe

#endif  // VISMOE_SERVER_METRICS_H_
