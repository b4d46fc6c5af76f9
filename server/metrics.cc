#include "server/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/listen_address.h"

namespace vismoe {

// Hit ratio and Hot Recall over the last `window` seconds, computed when
// scraped. A ring of per-second buckets: a bucket is reused (reset) when a
// later second maps onto it, and read only if its second is inside the window.
// Thread-safe; owned through a shared_ptr because the exposer holds a
// weak_ptr to every collectable.
class SlidingWindowRatios : public prometheus::Collectable {
 public:
  SlidingWindowRatios(int window_seconds, std::function<absl::Time()> clock)
      : clock_(std::move(clock)), buckets_(window_seconds) {}

  void AddQuery(bool hit) {
    absl::MutexLock lock(&mu_);
    Bucket& b = Current();
    ++b.queries;
    if (hit) ++b.hits;
  }
  void AddNeeded(bool recalled) {
    absl::MutexLock lock(&mu_);
    Bucket& b = Current();
    ++b.needed;
    if (recalled) ++b.recalled;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    uint64_t queries = 0, hits = 0, needed = 0, recalled = 0;
    {
      absl::MutexLock lock(&mu_);
      const int64_t now = Now();
      const int64_t oldest = now - static_cast<int64_t>(buckets_.size()) + 1;
      for (const Bucket& b : buckets_) {
        if (b.second < oldest || b.second > now) continue;
        queries += b.queries;
        hits += b.hits;
        needed += b.needed;
        recalled += b.recalled;
      }
    }
    const std::string window = absl::StrCat(buckets_.size(), " s");
    return {
        Gauge("vismoe_expert_cache_hit_ratio",
              "Expert cache hits / queries over the last " + window + " (NaN without queries).",
              hits, queries),
        Gauge("vismoe_prefetch_recall",
              "Hot Recall: prefetch_recalled / prefetch_needed over the last " + window +
                  " (NaN without needed experts).",
              recalled, needed),
    };
  }

 private:
  struct Bucket {
    int64_t second = std::numeric_limits<int64_t>::min();
    uint64_t queries = 0, hits = 0, needed = 0, recalled = 0;
  };

  static prometheus::MetricFamily Gauge(std::string name, std::string help, uint64_t num,
                                        uint64_t den) {
    prometheus::MetricFamily f;
    f.name = std::move(name);
    f.help = std::move(help);
    f.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric m;
    m.gauge.value = den == 0 ? std::numeric_limits<double>::quiet_NaN()
                             : static_cast<double>(num) / static_cast<double>(den);
    f.metric.push_back(std::move(m));
    return f;
  }

  int64_t Now() const { return absl::ToUnixSeconds(clock_ ? clock_() : absl::Now()); }

  Bucket& Current() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t now = Now();
    const int64_t n = static_cast<int64_t>(buckets_.size());
    Bucket& b = buckets_[static_cast<size_t>(((now % n) + n) % n)];
    if (b.second != now) b = Bucket{now};
    return b;
  }

  const std::function<absl::Time()> clock_;
  mutable absl::Mutex mu_;
  std::vector<Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

namespace {

// Bucket layouts: requests span 10 ms .. minutes on a memory-starved GPU
// (offload stalls), per-token steps 5 ms .. seconds, policy overheads
// tens of microseconds .. 100 ms.
const prometheus::Histogram::BucketBoundaries kTtftBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                              2.5,  5,     10,   20,  40,   80};
const prometheus::Histogram::BucketBoundaries kTpotBuckets = {
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5};
const prometheus::Histogram::BucketBoundaries kDurationBuckets = {0.1, 0.25, 0.5, 1,   2.5, 5,  10,
                                                                  20,  40,   80,  160, 320, 640};
const prometheus::Histogram::BucketBoundaries kImageDecodeBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
const prometheus::Histogram::BucketBoundaries kPolicyBuckets = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1};

// Sequences per step and rows per step: powers of two up to large batches
// and long prefill chunks.
const prometheus::Histogram::BucketBoundaries kBatchSizeBuckets = {1, 2, 4, 8, 16, 32, 64, 128};
const prometheus::Histogram::BucketBoundaries kStepTokensBuckets = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};

const char* SlotStateName(int s) {
  static const char* const kNames[] = {"free", "required", "speculative", "expired"};
  return kNames[s];
}

prometheus::Counter& NewCounter(prometheus::Registry& r, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Histogram& NewHistogram(prometheus::Registry& r, const std::string& name,
                                    const std::string& help,
                                    const prometheus::Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
}

// Non-negative finite seconds, or nothing: a broken timer must not poison sums.
bool ValidSeconds(double s) { return std::isfinite(s) && s >= 0; }

}  // namespace

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(
    const std::string& listen_address) {
  Options options;
  options.listen_address = listen_address;
  return Create(options);
}

namespace {

// civetweb options of the /metrics exposer. Each connection holds a worker
// thread while civetweb reads its request, so with civetweb's defaults (2
// workers, 30 s read timeout) two idle connections starve every scrape.
// Idle or slow clients are dropped after kExposerReadTimeoutMs and enough
// workers remain for scrapes meanwhile (each has a 100 KiB stack).
std::vector<std::string> ExposerOptions(const std::string& listen_address) {
  return {"listening_ports",    listen_address,
          "num_threads",        absl::StrCat(ServerMetrics::kExposerThreads),
          "request_timeout_ms", absl::StrCat(ServerMetrics::kExposerReadTimeoutMs)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(const Options& options) {
  if (options.window < absl::Seconds(1) ||
      options.window != absl::Seconds(absl::ToInt64Seconds(options.window))) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics window must be a whole number of seconds >= 1, got ",
                     absl::FormatDuration(options.window)));
  }
  if (!options.listen_address.empty()) {
    absl::Status s = server::CheckHostPort("metrics_listen", options.listen_address);
    if (!s.ok()) return s;
  }
  std::unique_ptr<ServerMetrics> m(new ServerMetrics(options));
  if (!options.listen_address.empty()) {
    try {
      m->exposer_ = std::make_unique<prometheus::Exposer>(ExposerOptions(options.listen_address));
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on '", options.listen_address, "': ", e.what()));
    }
    m->exposer_->RegisterCollectable(m->registry_);
    m->exposer_->RegisterCollectable(m->window_);
    const std::vector<int> ports = m->exposer_->GetListeningPorts();
    if (ports.empty()) {
      return absl::UnavailableError(
          absl::StrCat("metrics exposer on '", options.listen_address, "' has no listening port"));
    }
    m->metrics_port_ = ports.front();
  }
  return m;
}

ServerMetrics::ServerMetrics(const Options& options)
    : registry_(std::make_shared<prometheus::Registry>()),
      window_(std::make_shared<SlidingWindowRatios>(
          static_cast<int>(absl::ToInt64Seconds(options.window)), options.clock)) {
  prometheus::Registry& r = *registry_;
  cache_queries_ = &prometheus::BuildCounter()
                        .Name("vismoe_expert_cache_queries_total")
                        .Help("Expert lookups in the slab cache or pinned prefix.")
                        .Register(r);
  cache_hits_ = &prometheus::BuildCounter()
                     .Name("vismoe_expert_cache_hits_total")
                     .Help("Expert lookups that found the expert resident on the device.")
                     .Register(r);
  requests_ = &prometheus::BuildCounter()
                   .Name("vismoe_requests_total")
                   .Help(
                       "Finished requests by API (grpc, http) and status (ok or the lower-case "
                       "gRPC code name).")
                   .Register(r);
  gpu_memory_ = &prometheus::BuildGauge()
                     .Name("vismoe_gpu_memory_bytes")
                     .Help("Device memory carved for each region at start-up.")
                     .Register(r);
  auto& prompt = prometheus::BuildCounter()
                     .Name("vismoe_prompt_tokens_total")
                     .Help("Prompt tokens processed, text vs image (after token compression).")
                     .Register(r);
  prompt_tokens_text_ = &prompt.Add({{"modality", "text"}});
  prompt_tokens_image_ = &prompt.Add({{"modality", "image"}});
  // The label values of vismoe_prompt_tokens_total, so the two join in PromQL.
  auto& skipped = prometheus::BuildCounter()
                      .Name("vismoe_experts_skipped_total")
                      .Help(
                          "Routed expert activations dropped by expert skipping (MoDES), "
                          "by the token's modality.")
                      .Register(r);
  skipped_[static_cast<int>(TokenModality::kText)] = &skipped.Add({{"modality", "text"}});
  skipped_[static_cast<int>(TokenModality::kVisual)] = &skipped.Add({{"modality", "image"}});
  auto& committed = prometheus::BuildCounter()
                        .Name("vismoe_experts_committed_total")
                        .Help(
                            "Routed expert activations the commit miss policy computed without "
                            "a copy: choice=\"router\" with the router's own expert (resident or "
                            "in flight), choice=\"substitute\" with a predicted expert in place "
                            "of a missing one (differing from the router).")
                        .Register(r);
  committed_router_ = &committed.Add({{"choice", "router"}});
  committed_substitute_ = &committed.Add({{"choice", "substitute"}});
  auto& speculative = prometheus::BuildCounter()
                          .Name("vismoe_speculative_executions_total")
                          .Help(
                              "(token, expert) pairs speculative execution computed ahead on the "
                              "predicted input: kept=\"true\" where the router picked the expert "
                              "(the output entered the sum), kept=\"false\" where it did not.")
                          .Register(r);
  speculative_kept_ = &speculative.Add({{"kept", "true"}});
  speculative_discarded_ = &speculative.Add({{"kept", "false"}});
  auto& slots = prometheus::BuildGauge()
                    .Name("vismoe_slab_cache_slots")
                    .Help("Slab cache slots in each state.")
                    .Register(r);
  for (int s = 0; s < 4; ++s) slots_[s] = &slots.Add({{"state", SlotStateName(s)}});

  prefetch_needed_ = &NewCounter(r, "vismoe_prefetch_needed_total",
                                 "Activated experts outside the pinned prefix.");
  prefetch_recalled_ =
      &NewCounter(r, "vismoe_prefetch_recalled_total",
                  "Needed experts already resident or in flight when needed (Hot Recall).");
  prefetch_issued_ = &NewCounter(r, "vismoe_prefetch_issued_total",
                                 "Experts the predictor asked the transfer engine to fetch.");
  prefetch_used_ = &NewCounter(r, "vismoe_prefetch_used_total",
                               "Prefetched experts that were used before eviction.");
  preloaded_ =
      &NewCounter(r, "vismoe_preloaded_experts_total",
                  "Experts copied in for a sequence's preferred set (per-sequence preload).");
  preloaded_used_ = &NewCounter(r, "vismoe_preloaded_experts_used_total",
                                "Preloaded experts that a later step used before eviction.");
  bytes_h2d_ =
      &NewCounter(r, "vismoe_expert_bytes_h2d_total", "Expert weight bytes copied host to device.");
  stall_seconds_ = &NewCounter(r, "vismoe_transfer_stall_seconds_total",
                               "Time compute waited for expert transfers.");
  host_computed_ = &NewCounter(
      r, "vismoe_experts_host_computed_total",
      "Experts computed on the host instead of copied to the device (miss policy cpu, static "
      "host layers).");
  bytes_not_copied_ =
      &NewCounter(r, "vismoe_expert_bytes_not_copied_total",
                  "Expert weight bytes not copied host to device because the host computed them.");
  generated_tokens_ =
      &NewCounter(r, "vismoe_generated_tokens_total", "Completion tokens generated.");
  visual_pruned_ = &NewCounter(r, "vismoe_visual_tokens_pruned_total",
                               "Visual tokens dropped by the token compressor.");
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("vismoe_queue_depth")
                      .Help("Requests admitted and waiting for the engine.")
                      .Register(r)
                      .Add({});
  running_requests_ = &prometheus::BuildGauge()
                           .Name("vismoe_running_requests")
                           .Help("Requests the engine is generating for.")
                           .Register(r)
                           .Add({});
  auto& ttft = prometheus::BuildHistogram()
                   .Name("vismoe_time_to_first_token_seconds")
                   .Help("Time from request start to the first generated token.")
                   .Register(r);
  auto& tpot = prometheus::BuildHistogram()
                   .Name("vismoe_time_per_output_token_seconds")
                   .Help("Mean time per output token after the first, per request.")
                   .Register(r);
  auto& duration = prometheus::BuildHistogram()
                       .Name("vismoe_request_duration_seconds")
                       .Help("Total engine time of a request.")
                       .Register(r);
  for (const Api api : {Api::kGrpc, Api::kHttp}) {
    const prometheus::Labels labels = {{"api", ApiLabel(api)}};
    LatencySeries& l = latency_[static_cast<int>(api)];
    l.ttft = &ttft.Add(labels, kTtftBuckets);
    l.tpot = &tpot.Add(labels, kTpotBuckets);
    l.duration = &duration.Add(labels, kDurationBuckets);
  }
  image_decode_ = &NewHistogram(r, "vismoe_image_decode_seconds",
                                "Time to decode one request image.", kImageDecodeBuckets);
  compression_ = &NewHistogram(r, "vismoe_compression_seconds",
                               "Time of one token-compression pass.", kPolicyBuckets);
  predictor_ = &NewHistogram(r, "vismoe_predictor_seconds", "Time of one expert-predictor refresh.",
                             kPolicyBuckets);
  RegisterSchedulerMetrics(r);

  // Zero series so request-rate, error-rate and rate(hits)/rate(queries)
  // panels and alerts have data (0, not "no data") before the first request
  // of each kind: one per status label a request can end with.
  for (const char* status :
       {"ok", "cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
        "already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
        "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
        "unauthenticated"}) {
    for (const Api api : {Api::kGrpc, Api::kHttp}) {
      requests_->Add({{"api", ApiLabel(api)}, {"status", status}});
    }
  }
  absl::MutexLock lock(&mu_);
  CacheSeries(Phase::kPrefill, 0);
  CacheSeries(Phase::kDecode, 0);
}

ServerMetrics::~ServerMetrics() {
  // Stop serving before the families go away.
  exposer_.reset();
}

ServerMetrics::CachePair& ServerMetrics::CacheSeries(Phase phase, int layer) {
  std::vector<CachePair>& v = cache_by_layer_[phase == Phase::kPrefill ? 0 : 1];
  if (static_cast<size_t>(layer) >= v.size()) v.resize(static_cast<size_t>(layer) + 1);
  CachePair& p = v[static_cast<size_t>(layer)];
  if (p.queries == nullptr) {
    const prometheus::Labels labels = {{"phase", PhaseName(phase)},
                                       {"layer", std::to_string(layer)}};
    p.queries = &cache_queries_->Add(labels);
    p.hits = &cache_hits_->Add(labels);
  }
  return p;
}

void ServerMetrics::DeclareLayers(int num_layers) {
  absl::MutexLock lock(&mu_);
  for (int l = 0; l < num_layers; ++l) {
    CacheSeries(Phase::kPrefill, l);
    CacheSeries(Phase::kDecode, l);
  }
}

void ServerMetrics::OnRequestFinished(Api api, absl::string_view status_label) {
  requests_->Add({{"api", ApiLabel(api)}, {"status", std::string(status_label)}}).Increment();
}

void ServerMetrics::ObserveResult(Api api, const GenerateResult& r) {
  const RequestUsage& u = r.usage;
  const RequestTimings& t = r.timings;
  const LatencySeries& l = latency_[static_cast<int>(api)];
  if (u.completion_tokens >= 1 && ValidSeconds(t.ttft_seconds)) l.ttft->Observe(t.ttft_seconds);
  if (u.completion_tokens >= 2 && ValidSeconds(t.tpot_seconds)) l.tpot->Observe(t.tpot_seconds);
  if (ValidSeconds(t.total_seconds)) l.duration->Observe(t.total_seconds);
  if (u.completion_tokens > 0) generated_tokens_->Increment(u.completion_tokens);
  // prompt_tokens counts every visual token before compression; the image
  // series counts those the decoder kept.
  const int image = u.visual_tokens_after > 0 ? u.visual_tokens_after : 0;
  const int text = u.prompt_tokens - std::max(u.visual_tokens_before, 0);
  if (text > 0) prompt_tokens_text_->Increment(text);
  if (image > 0) prompt_tokens_image_->Increment(image);
}

void ServerMetrics::ObserveImageDecode(double seconds) {
  if (ValidSeconds(seconds)) image_decode_->Observe(seconds);
}

void ServerMetrics::RegisterSchedulerMetrics(prometheus::Registry& r) {
  auto& sequences = prometheus::BuildGauge()
                        .Name("vismoe_engine_sequences")
                        .Help("Requests inside the engine: running in its forward steps "
                              "(holding KV blocks) or waiting to be admitted.")
                        .Register(r);
  sequences_running_ = &sequences.Add({{"state", "running"}});
  sequences_waiting_ = &sequences.Add({{"state", "waiting"}});
  auto& blocks = prometheus::BuildGauge()
                     .Name("vismoe_kv_blocks")
                     .Help("KV cache blocks (16 tokens) held by running requests, and free.")
                     .Register(r);
  kv_blocks_used_ = &blocks.Add({{"state", "used"}});
  kv_blocks_free_ = &blocks.Add({{"state", "free"}});
  preemptions_ = &NewCounter(r, "vismoe_preemptions_total",
                             "Running requests preempted to free KV blocks for others (their "
                             "tokens are recomputed when they run again).");
  batch_size_ = &NewHistogram(r, "vismoe_batch_size", "Sequences in one forward step.",
                              kBatchSizeBuckets);
  step_tokens_ = &NewHistogram(r, "vismoe_step_tokens",
                               "Rows of one forward step (decode tokens + prefill chunk tokens).",
                               kStepTokensBuckets);
}

void ServerMetrics::OnSchedulerStep(int sequences, int64_t tokens) {
  batch_size_->Observe(static_cast<double>(sequences));
  step_tokens_->Observe(static_cast<double>(tokens));
}

void ServerMetrics::SetSequences(int64_t running, int64_t waiting) {
  sequences_running_->Set(static_cast<double>(running));
  sequences_waiting_->Set(static_cast<double>(waiting));
}

void ServerMetrics::SetKvBlocks(int64_t used, int64_t total) {
  kv_blocks_used_->Set(static_cast<double>(used));
  kv_blocks_free_->Set(static_cast<double>(total - used));
}

void ServerMetrics::OnPreemption() { preemptions_->Increment(); }

void ServerMetrics::SetQueueDepth(int64_t n) { queue_depth_->Set(static_cast<double>(n)); }

void ServerMetrics::SetRunningRequests(int64_t n) {
  running_requests_->Set(static_cast<double>(n));
}

void ServerMetrics::OnExpertQuery(Phase phase, int layer, bool hit) {
  if (layer < 0) return;  // not a layer: nothing sensible to label it with
  {
    absl::MutexLock lock(&mu_);
    CachePair& p = CacheSeries(phase, layer);
    p.queries->Increment();
    if (hit) p.hits->Increment();
  }
  window_->AddQuery(hit);
}

void ServerMetrics::OnPrefetchNeeded(int /*layer*/, bool recalled) {
  prefetch_needed_->Increment();
  if (recalled) prefetch_recalled_->Increment();
  window_->AddNeeded(recalled);
}

void ServerMetrics::OnPrefetchIssued(uint64_t count) {
  prefetch_issued_->Increment(static_cast<double>(count));
}

void ServerMetrics::OnPrefetchUsed(uint64_t count) {
  prefetch_used_->Increment(static_cast<double>(count));
}

void ServerMetrics::OnPreloadIssued(uint64_t count) {
  preloaded_->Increment(static_cast<double>(count));
}

void ServerMetrics::OnPreloadUsed(uint64_t count) {
  preloaded_used_->Increment(static_cast<double>(count));
}

void ServerMetrics::OnBytesHostToDevice(uint64_t bytes) {
  bytes_h2d_->Increment(static_cast<double>(bytes));
}

void ServerMetrics::OnTransferStall(double seconds) {
  if (ValidSeconds(seconds)) stall_seconds_->Increment(seconds);
}

void ServerMetrics::OnExpertsHostComputed(uint64_t count, uint64_t bytes_not_copied) {
  host_computed_->Increment(static_cast<double>(count));
  bytes_not_copied_->Increment(static_cast<double>(bytes_not_copied));
}

void ServerMetrics::OnVisualTokensPruned(uint64_t count) {
  visual_pruned_->Increment(static_cast<double>(count));
}

void ServerMetrics::OnExpertsSkipped(TokenModality modality, uint64_t count) {
  skipped_[static_cast<int>(modality)]->Increment(static_cast<double>(count));
}

void ServerMetrics::OnExpertsCommitted(uint64_t router, uint64_t substitute) {
  committed_router_->Increment(static_cast<double>(router));
  committed_substitute_->Increment(static_cast<double>(substitute));
}

void ServerMetrics::OnSpeculativeExecutions(uint64_t kept, uint64_t discarded) {
  speculative_kept_->Increment(static_cast<double>(kept));
  speculative_discarded_->Increment(static_cast<double>(discarded));
}

void ServerMetrics::OnCompressionTime(double seconds) {
  if (ValidSeconds(seconds)) compression_->Observe(seconds);
}

void ServerMetrics::OnPredictorTime(double seconds) {
  if (ValidSeconds(seconds)) predictor_->Observe(seconds);
}

void ServerMetrics::SetSlotCount(SlotState state, int64_t count) {
  const int s = static_cast<int>(state);
  if (s < 0 || s >= 4) return;
  slots_[s]->Set(static_cast<double>(count));
}

void ServerMetrics::SetMemoryRegion(std::string_view region, int64_t bytes) {
  gpu_memory_->Add({{"region", std::string(region)}}).Set(static_cast<double>(bytes));
}

std::string ServerMetrics::Serialize() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (auto& f : window_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace vismoe
