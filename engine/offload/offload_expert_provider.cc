#include "engine/offload/offload_expert_provider.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"
#include "engine/offload/host_store_mode.h"
#include "spdlog/spdlog.h"

namespace vismoe {
namespace {

// How often a blocked Acquire asks the step's interrupt (SetStepInterrupt):
// a cancelled or expired step leaves within this of its last wish to stop.
constexpr std::chrono::milliseconds kInterruptPoll{20};

// Copies every expert of `layer` from `store` into the pinned prefix at `dst`
// (one format().bytes block per expert), through `copy` or by memcpy: one copy
// of the whole layer from a packed store, a gather per expert from a mapped one.
absl::Status UploadLayer(const HostExpertStore& store, int layer, int num_experts,
                         CopyBackend* copy, char* dst) {
  const size_t stride = store.format().bytes;
  const int experts_per_copy = store.mapped() ? 1 : num_experts;
  for (int e = 0; e < num_experts; e += experts_per_copy) {
    char* block = dst + static_cast<size_t>(e) * stride;
    HostExpertStore::Segments segments = store.CopySegments(layer, e);
    if (segments.empty()) {
      return absl::InternalError(absl::StrCat("pinned layer ", layer, " is not in its host store"));
    }
    if (!store.mapped()) segments[0].bytes = stride * static_cast<size_t>(num_experts);
    for (const CopySegment& seg : segments) {
      if (copy == nullptr) {
        std::memcpy(block + seg.dst_offset, seg.src, seg.bytes);
        continue;
      }
      absl::Status st = copy->Copy(block + seg.dst_offset, seg.src, seg.bytes);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("uploading pinned layer ", layer, " expert ", e,
                                                    " through ", copy->name(), ": ", st.message()));
      }
    }
  }
  return absl::OkStatus();
}

int64_t ExpertKey(int layer, int expert) {
  return (static_cast<int64_t>(layer) << 32) | static_cast<uint32_t>(expert);
}

NullStatsSink* NullSink() {
  static NullStatsSink* s = new NullStatsSink();
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OffloadExpertProvider>> OffloadExpertProvider::Create(
    ExpertProvider& source, const TextConfig& config, const MemoryPlan& plan,
    const OffloadOptions& options, StatsSink* stats, std::unique_ptr<ExpertPredictor> predictor,
    const OffloadDevice& device) {
  VISMOE_ASSIGN_OR_RETURN(EvictionPolicy policy, ParseEvictionPolicy(options.eviction));
  if (!PolicyFromName<PredictorKind>(options.prefetch).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("prefetch policy must be one of ",
                                                   PolicyNames<PredictorKind>(", "), "; got '",
                                                   options.prefetch, "'"));
  }
  if (options.lookahead_window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookahead window must be >= 1 MoE layer, got ", options.lookahead_window));
  }
  if (options.copy_bandwidth_bytes_per_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("copy bandwidth must be >= 0 bytes/s, got ",
                                                   options.copy_bandwidth_bytes_per_s));
  }
  if (options.history_decay <= 0 || options.history_decay > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("history decay must be in (0, 1], got ", options.history_decay));
  }
  VISMOE_RETURN_IF_ERROR(CheckPreloadOptions(options));
  const std::optional<HostStoreMode> mode = PolicyFromName<HostStoreMode>(options.host_experts);
  if (!mode.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("host experts must be one of ",
                                                   PolicyNames<HostStoreMode>(", "), "; got '",
                                                   options.host_experts, "'"));
  }
  std::unique_ptr<OffloadExpertProvider> p(new OffloadExpertProvider());
  p->plan_ = plan;
  p->options_ = options;
  p->num_experts_ = config.num_experts;
  p->prefetch_count_ =
      options.prefetch_count > 0 ? options.prefetch_count : config.num_experts_per_tok;
  p->sink_ = stats != nullptr ? stats : NullSink();
  const int num_layers = config.num_hidden_layers;
  p->kind_.assign(num_layers, Kind::kDense);
  p->pinned_.assign(num_layers, nullptr);
  for (int l : plan.pinned_layer_ids) p->kind_.at(l) = Kind::kPinned;
  for (int l : plan.offloaded_layer_ids) p->kind_.at(l) = Kind::kOffloaded;
  VISMOE_RETURN_IF_ERROR(p->SetUpHostExecution(options));
  std::vector<int> on_device;  // offloaded layers whose experts are copied
  for (int l : plan.offloaded_layer_ids) {
    if (!p->host_layer_[l]) on_device.push_back(l);
  }
  p->next_offloaded_.assign(num_layers, -1);
  p->predicted_.assign(num_layers, {});
  for (int l = 0; l < num_layers && !on_device.empty(); ++l) {
    auto it = std::upper_bound(on_device.begin(), on_device.end(), l);
    p->next_offloaded_[l] = it == on_device.end() ? on_device.front() : *it;
  }

  // Host store for the offloaded layers. The pinned prefix is packed one layer
  // at a time through a short-lived store and copied into the arena, so host
  // memory never holds a second copy of every prefix layer at once (a 30B
  // synthetic checkpoint already fills half the host).
  const int64_t packed_bytes = plan.expert_bytes * config.num_experts *
                               static_cast<int64_t>(plan.offloaded_layer_ids.size());
  const bool map = MapHostExperts(*mode, device.host_allocator != nullptr, packed_bytes,
                                  device.host_memory_available);
  VISMOE_ASSIGN_OR_RETURN(
      p->store_, HostExpertStore::Create(source, plan.offloaded_layer_ids, config.num_experts,
                                         device.host_allocator, device.expert_dtype, map));
  const std::vector<int>& prefix_layers = plan.pinned_layer_ids;
  // A prefix layer's store lives only while it is uploaded: mapping it saves a
  // temporary copy unless packing was asked for.
  auto pack_layer = [&](int layer) {
    return HostExpertStore::Create(source, {layer}, config.num_experts, nullptr,
                                   device.expert_dtype, *mode != HostStoreMode::kPacked);
  };
  std::unique_ptr<HostExpertStore> one;  // the prefix layer being uploaded
  ExpertFormat pinned_format;
  if (!prefix_layers.empty()) {
    VISMOE_ASSIGN_OR_RETURN(one, pack_layer(prefix_layers[0]));
    pinned_format = one->format();
  }
  const size_t stride =
      !plan.offloaded_layer_ids.empty() ? p->store_->format().bytes : pinned_format.bytes;
  p->stride_ = stride;
  const int64_t layer_bytes = static_cast<int64_t>(pinned_format.bytes) * config.num_experts;
  const int64_t pinned_bytes = layer_bytes * static_cast<int64_t>(prefix_layers.size());
  const int64_t slab_bytes = static_cast<int64_t>(stride) * plan.num_slabs;
  VISMOE_ASSIGN_OR_RETURN(p->arena_,
                          DeviceArena::Create(DeviceArena::CapacityFor({pinned_bytes, slab_bytes}),
                                              device.device_allocator));
  VISMOE_ASSIGN_OR_RETURN(char* prefix, p->arena_->Carve("pinned_prefix", pinned_bytes));
  for (size_t i = 0; i < prefix_layers.size(); ++i) {
    const int layer = prefix_layers[i];
    if (i > 0) {
      one.reset();  // before packing the next: one layer in host memory at a time
      VISMOE_ASSIGN_OR_RETURN(one, pack_layer(layer));
      if (one->format() != pinned_format) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", layer, "'s experts differ in layout, dtype or shape from layer ",
                         prefix_layers[0], "'s"));
      }
    }
    char* dst = prefix + static_cast<int64_t>(i) * layer_bytes;
    VISMOE_RETURN_IF_ERROR(UploadLayer(*one, layer, config.num_experts, device.copy, dst));
    p->pinned_[layer] = dst;
  }
  p->store_format_pinned_ = pinned_format;
  p->pinned_stride_ = pinned_format.bytes;
  VISMOE_ASSIGN_OR_RETURN(p->slabs_, p->arena_->Carve("slab_cache", slab_bytes));
  p->cache_ = std::make_unique<SlabCache>(plan.num_slabs, policy);
  // Only layers whose experts are copied: the host layers' are never copied.
  p->preload_ = std::make_unique<PreloadSet>(plan.num_slabs, options.preload_share,
                                             config.num_experts, on_device);
  p->predictor_ = std::move(predictor);
  p->transfer_ = std::make_unique<TransferEngine>(
      TransferEngine::Options{options.copy_bandwidth_bytes_per_s, false, device.copy});
  p->sink_->SetMemoryRegion("resident", plan.resident_bytes);
  p->sink_->SetMemoryRegion("pinned_prefix", pinned_bytes);
  p->sink_->SetMemoryRegion("slab_cache", slab_bytes);
  p->sink_->SetMemoryRegion("activations", plan.activation_bytes);
  {
    std::lock_guard<std::mutex> lock(p->mu_);
    p->PublishSlotGaugesLocked();
  }
  spdlog::info(
      "offload: {}; eviction {}, prefetch {}, copy bandwidth {} B/s; host experts {}; miss policy "
      "{}, {} MoE layers on the host",
      plan.DebugString(), EvictionPolicyName(policy),
      p->predictor_ != nullptr ? p->predictor_->name() : "none", options.copy_bandwidth_bytes_per_s,
      p->store_->mapped()
          ? absl::StrCat("served from the checkpoint (no second copy; host_experts ",
                         options.host_experts, ")")
          : absl::StrCat("packed (", p->store_->total_bytes(), " bytes; host_experts ",
                         options.host_experts, ")"),
      PolicyName(p->miss_policy_), options.host_moe_layers);
  return p;
}

OffloadExpertProvider::~OffloadExpertProvider() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    cv_.notify_all();
  }
  if (transfer_ != nullptr) transfer_->Shutdown();
}

absl::Status OffloadExpertProvider::CheckIds(int layer, int expert) const {
  if (layer < 0 || layer >= static_cast<int>(kind_.size()) || kind_[layer] == Kind::kDense) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " is not a MoE layer"));
  }
  if (expert < 0 || expert >= num_experts_) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": expert ", expert,
                                                   " out of range [0, ", num_experts_, ")"));
  }
  return absl::OkStatus();
}

void OffloadExpertProvider::PublishSlotGaugesLocked() {
  for (SlotState s :
       {SlotState::kFree, SlotState::kRequired, SlotState::kSpeculative, SlotState::kExpired}) {
    sink_->SetSlotCount(s, cache_->Count(s));
  }
}

void OffloadExpertProvider::StartCopyLocked(int slot, int layer, int expert, double priority) {
  ++in_flight_;
  request_.bytes_h2d += stride_;
  sink_->OnBytesHostToDevice(stride_);
  TransferEngine::Request r;
  r.segments = store_->CopySegments(layer, expert);
  r.dst = const_cast<void*>(SlabData(slot));
  r.bytes = stride_;
  r.priority = priority;
  r.on_done = [this, slot](const absl::Status& copied) { OnCopyDone(slot, copied); };
  // The copy thread takes mu_ only in OnCopyDone, after releasing its own
  // lock, so submitting under mu_ cannot deadlock.
  transfer_->Submit(std::move(r));
}

void OffloadExpertProvider::OnCopyDone(int slot, const absl::Status& copied) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  if (copied.ok()) {
    cache_->MarkLoaded(slot);
  } else if (absl::IsCancelled(copied)) {
    shutting_down_ = true;  // only Shutdown cancels copies
  } else {
    // The slab's bytes are unknown: it holds nothing again. A waiting Acquire
    // of this expert fails with the copy's error.
    const SlabCache::Slot& s = cache_->slot(slot);
    failed_copies_.push_back({ExpertKey(s.layer, s.expert), copied});
    cache_->Drop(slot);  // the next Acquire or BeginLayer dispatches into it
  }
  cv_.notify_all();
}

int OffloadExpertProvider::DispatchDemandLocked() {
  int started = 0;
  while (!pending_.empty()) {
    const int victim = cache_->PickVictim(/*demand=*/true);
    if (victim < 0) break;
    const int e = pending_.front();
    pending_.erase(pending_.begin());
    cache_->Assign(victim, current_layer_, e, SlotState::kRequired, /*prefetched=*/false);
    cache_->Touch(victim);
    StartCopyLocked(victim, current_layer_, e,
                    kDemandPriority - static_cast<double>(demand_seq_++));
    ++started;
  }
  return started;
}

void OffloadExpertProvider::UpdatePrioritiesLocked(int layer) {
  if (predictor_ == nullptr || cache_->policy() != EvictionPolicy::kGuardedPriority) return;
  // The layer now running is behind the window once it ends.
  if (kind_[layer] == Kind::kOffloaded) {
    for (int e = 0; e < num_experts_; ++e) cache_->SetPriority(layer, e, 0);
  }
  std::vector<double> score(num_experts_);
  int target = next_offloaded_[layer];
  for (int w = 0; w < options_.lookahead_window && target >= 0 && target != layer; ++w) {
    std::fill(score.begin(), score.end(), 0.0);
    for (const auto& [e, s] : predictor_->Predict(target, num_experts_)) {
      if (e >= 0 && e < num_experts_) score[e] = s;
    }
    for (int e = 0; e < num_experts_; ++e) cache_->SetPriority(target, e, score[e]);
    target = next_offloaded_[target];
    if (target == next_offloaded_[layer]) break;  // wrapped all the way round
  }
}

void OffloadExpertProvider::PrefetchLocked(int layer) {
  if (predictor_ == nullptr) return;
  const int next = next_offloaded_[layer];
  if (next < 0) return;
  std::vector<int>& chosen = predicted_[next];
  chosen.clear();  // no prefetch this time: no choice for the commit policy either
  if (!pending_.empty()) return;
  const std::vector<std::pair<int, double>> predicted = predictor_->Predict(next, prefetch_count_);
  for (const auto& [e, score] : predicted) {
    if (e >= 0 && e < num_experts_) chosen.push_back(e);
  }
  uint64_t issued = 0;
  for (const auto& [e, score] : predicted) {
    if (e < 0 || e >= num_experts_) continue;
    if (cache_->Find(next, e) >= 0) continue;
    const int victim = cache_->PickVictim(/*demand=*/false);
    if (victim < 0) break;
    cache_->Assign(victim, next, e, SlotState::kSpeculative, /*prefetched=*/true);
    StartCopyLocked(victim, next, e, score);
    ++issued;
  }
  if (issued > 0) {
    request_.prefetch_issued += issued;
    sink_->OnPrefetchIssued(issued);
  }
}

absl::StatusOr<std::vector<int>> OffloadExpertProvider::BeginLayer(Phase phase, int layer,
                                                                   absl::Span<const int> experts) {
  VISMOE_ASSIGN_OR_RETURN(LayerPlan plan, Begin(phase, layer, experts, {}, /*host_ok=*/false));
  return std::move(plan.order);
}

absl::StatusOr<LayerPlan> OffloadExpertProvider::BeginRoutedLayer(
    Phase phase, int layer, absl::Span<const int> experts, absl::Span<const int64_t> tokens) {
  if (tokens.size() != experts.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer, ": ", tokens.size(), " token counts for ", experts.size(), " experts"));
  }
  for (int64_t m : tokens) {
    if (m < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", layer, ": an expert declared with ", m, " routed tokens"));
    }
  }
  return Begin(phase, layer, experts, tokens, /*host_ok=*/true);
}

absl::StatusOr<LayerPlan> OffloadExpertProvider::Begin(Phase phase, int layer,
                                                       absl::Span<const int> experts,
                                                       absl::Span<const int64_t> tokens,
                                                       bool host_ok) {
  for (int e : experts) VISMOE_RETURN_IF_ERROR(CheckIds(layer, e));
  std::vector<int> ids(experts.begin(), experts.end());
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": duplicate expert ids"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (kind_[layer] == Kind::kPinned) {
    request_.cache_queries += experts.size();
    request_.cache_hits += experts.size();
    for (size_t i = 0; i < experts.size(); ++i) sink_->OnExpertQuery(phase, layer, true);
    // The pinned prefix computes while the first offloaded layer's experts
    // come in (only between offloaded layers: never under a running one).
    if (predictor_ != nullptr && current_layer_ < 0 && !shutting_down_) {
      PredictLocked(layer);
      PublishSlotGaugesLocked();
    }
    LayerPlan plan;
    plan.order.assign(experts.begin(), experts.end());
    return plan;
  }
  if (current_layer_ >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("BeginLayer(", layer, ") while layer ", current_layer_, " has not ended"));
  }
  if (shutting_down_) return absl::CancelledError("offload runtime is shutting down");
  current_layer_ = layer;
  failed_copies_.clear();
  declared_.assign(experts.begin(), experts.end());
  LayerPlan plan = PlanLocked(phase, layer, experts, tokens, host_ok);
  DispatchDemandLocked();
  if (predictor_ != nullptr) PredictLocked(layer);
  PublishSlotGaugesLocked();
  return plan;
}

LayerPlan OffloadExpertProvider::PlanLocked(Phase phase, int layer, absl::Span<const int> experts,
                                            absl::Span<const int64_t> tokens, bool host_ok) {
  pending_.clear();
  on_host_.clear();
  std::vector<int> loaded, loading;
  uint64_t used = 0;
  uint64_t preloaded_used = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    const int e = experts[i];
    const int slot = cache_->Find(layer, e);
    const bool hit = slot >= 0;
    ++request_.cache_queries;
    ++request_.prefetch_needed;
    sink_->OnExpertQuery(phase, layer, hit);
    sink_->OnPrefetchNeeded(layer, hit);
    if (cache_->IsProtected(layer, e)) ++request_.preload_kept_lookups;
    if (!hit) {
      (host_ok && HostComputesLocked(layer, tokens[i]) ? on_host_ : pending_).push_back(e);
      continue;
    }
    ++request_.cache_hits;
    ++request_.prefetch_recalled;
    if (cache_->slot(slot).prefetched) {
      ++used;
      cache_->ClearPrefetched(slot);
    }
    if (cache_->slot(slot).preloaded) {
      ++preloaded_used;
      cache_->SetPreloaded(slot, false);
    }
    cache_->SetState(slot, SlotState::kRequired);
    cache_->Touch(slot);
    (cache_->slot(slot).in_flight ? loading : loaded).push_back(e);
  }
  if (used > 0) {
    request_.prefetch_used += used;
    sink_->OnPrefetchUsed(used);
  }
  if (preloaded_used > 0) {
    request_.preload_used += preloaded_used;
    sink_->OnPreloadUsed(preloaded_used);
  }
  CountHostLocked(on_host_.size());
  // Resident experts first, then the host's (computed while copies land),
  // then those still copying, then those waiting for a slab.
  LayerPlan plan;
  for (const auto* part : {&loaded, &on_host_, &loading, &pending_}) {
    plan.order.insert(plan.order.end(), part->begin(), part->end());
    plan.on_host.insert(plan.on_host.end(), part->size(), part == &on_host_ ? 1 : 0);
  }
  if (on_host_.empty()) plan.on_host.clear();
  return plan;
}

void OffloadExpertProvider::PredictLocked(int layer) {
  const auto start = std::chrono::steady_clock::now();
  UpdatePrioritiesLocked(layer);
  PrefetchLocked(layer);
  sink_->OnPredictorTime(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

absl::StatusOr<ExpertWeights> OffloadExpertProvider::PinnedWeights(int layer, int expert) {
  VISMOE_RETURN_IF_ERROR(CheckIds(layer, expert));
  if (kind_[layer] != Kind::kPinned) return ExpertProvider::PinnedWeights(layer, expert);
  return store_format_pinned_.View(pinned_[layer] + static_cast<size_t>(expert) * pinned_stride_);
}

absl::StatusOr<ExpertWeights> OffloadExpertProvider::Acquire(int layer, int expert) {
  VISMOE_RETURN_IF_ERROR(CheckIds(layer, expert));
  if (kind_[layer] == Kind::kPinned) return PinnedWeights(layer, expert);
  std::unique_lock<std::mutex> lock(mu_);
  if (layer != current_layer_ ||
      std::find(declared_.begin(), declared_.end(), expert) == declared_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Acquire(", layer, ", ", expert, ") of an expert not declared by BeginLayer"));
  }
  if (std::find(on_host_.begin(), on_host_.end(), expert) != on_host_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Acquire(", layer, ", ", expert, ") of an expert the plan computes on the host"));
  }
  std::chrono::steady_clock::time_point wait_start;
  bool stalled = false;
  int slot = -1;
  for (;;) {
    if (shutting_down_) return absl::CancelledError("offload runtime is shutting down");
    slot = cache_->Find(layer, expert);
    if (slot >= 0 && cache_->slot(slot).state != SlotState::kRequired) {
      return absl::FailedPreconditionError(
          absl::StrCat("Acquire(", layer, ", ", expert, ") after its Release"));
    }
    if (slot >= 0 && !cache_->slot(slot).in_flight) break;
    if (slot < 0) {
      for (const auto& [key, error] : failed_copies_) {
        if (key != ExpertKey(layer, expert)) continue;
        return absl::UnavailableError(absl::StrCat("copy of layer ", layer, " expert ", expert,
                                                   " to the device failed: ", error.message()));
      }
      // Still waiting for a slab: put it first in line and try again.
      auto it = std::find(pending_.begin(), pending_.end(), expert);
      if (it != pending_.end()) std::rotate(pending_.begin(), it, it + 1);
      if (DispatchDemandLocked() > 0) continue;
      if (in_flight_ == 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "slab cache of ", cache_->num_slots(), " slabs cannot take layer ", layer, " expert ",
            expert, ": every slab is Required or pinned and no copy is in flight"));
      }
    }
    if (!stalled) {
      stalled = true;
      wait_start = std::chrono::steady_clock::now();
    }
    if (!interrupt_) {
      cv_.wait(lock);
      continue;
    }
    // The caller's check may take its own locks: never under ours.
    const std::function<bool()> interrupted = interrupt_;
    lock.unlock();
    const bool stop = interrupted();
    lock.lock();
    if (stop) {
      return absl::CancelledError(
          absl::StrCat("every sequence of the step was cancelled or expired while layer ", layer,
                       " expert ", expert, " was being copied"));
    }
    cv_.wait_for(lock, kInterruptPoll);
  }
  if (stalled) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
    request_.stall_seconds += s;
    sink_->OnTransferStall(s);
  }
  cache_->Pin(slot);
  return store_->format().View(SlabData(slot));
}

void OffloadExpertProvider::SetStepInterrupt(std::function<bool()> interrupted) {
  std::lock_guard<std::mutex> lock(mu_);
  interrupt_ = std::move(interrupted);
}

bool OffloadExpertProvider::Ready(int layer, int expert) {
  if (!CheckIds(layer, expert).ok()) return false;
  if (kind_[layer] == Kind::kPinned) return true;
  std::lock_guard<std::mutex> lock(mu_);
  const int slot = cache_->Find(layer, expert);
  return slot >= 0 && !cache_->slot(slot).in_flight;
}

void OffloadExpertProvider::Release(int layer, int expert) {
  if (!CheckIds(layer, expert).ok() || kind_[layer] == Kind::kPinned) return;
  std::lock_guard<std::mutex> lock(mu_);
  const int slot = cache_->Find(layer, expert);
  if (slot < 0 || cache_->slot(slot).pins == 0) {
    spdlog::error("offload: Release({}, {}) without a matching Acquire", layer, expert);
    return;
  }
  cache_->Unpin(slot);
  if (cache_->slot(slot).pins == 0) cache_->SetState(slot, SlotState::kExpired);
  DispatchDemandLocked();
  cv_.notify_all();
}

void OffloadExpertProvider::EndLayer(int layer) {
  if (layer < 0 || layer >= static_cast<int>(kind_.size()) || kind_[layer] != Kind::kOffloaded) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < cache_->num_slots(); ++i) {
    const SlabCache::Slot& s = cache_->slot(i);
    if (s.layer != layer || s.pins > 0) continue;
    if (s.state == SlotState::kRequired || s.state == SlotState::kSpeculative) {
      cache_->SetState(i, SlotState::kExpired);
    }
  }
  pending_.clear();
  declared_.clear();
  on_host_.clear();
  if (current_layer_ == layer) current_layer_ = -1;
  PublishSlotGaugesLocked();
  cv_.notify_all();
}

ExpertAvailability OffloadExpertProvider::Availability(int layer) {
  ExpertAvailability a;
  if (layer < 0 || layer >= static_cast<int>(kind_.size()) || kind_[layer] != Kind::kOffloaded) {
    a.all = true;  // pinned (or dense): nothing is ever copied for it
    return a;
  }
  std::lock_guard<std::mutex> lock(mu_);
  a.available.assign(static_cast<size_t>(num_experts_), 0);
  for (int e = 0; e < num_experts_; ++e) a.available[e] = cache_->Find(layer, e) >= 0 ? 1 : 0;
  a.predicted = predicted_[layer];
  return a;
}

void OffloadExpertProvider::BeginRequest() {
  std::lock_guard<std::mutex> lock(mu_);
  if (predictor_ != nullptr) predictor_->BeginRequest();
}

OffloadStats OffloadExpertProvider::TakeRequestStats() {
  std::lock_guard<std::mutex> lock(mu_);
  OffloadStats s = request_;
  request_ = OffloadStats();
  return s;
}

void OffloadExpertProvider::SetExpertPriority(int layer, int expert, double priority) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_->SetPriority(layer, expert, priority);
}

bool OffloadExpertProvider::CheckInvariants(std::string* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cache_->CheckInvariants(why)) return false;
  int flying = 0;
  for (int i = 0; i < cache_->num_slots(); ++i) flying += cache_->slot(i).in_flight ? 1 : 0;
  if (flying != in_flight_) {
    *why = absl::StrCat(flying, " slots in flight, ", in_flight_, " copies outstanding");
    return false;
  }
  return true;
}

}  // namespace vismoe
