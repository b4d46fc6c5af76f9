// OffloadStats: the offload counters of one request (the per-request slice of
// StatsSink), as the expert providers count them.
#ifndef VISMOE_ENGINE_OFFLOAD_OFFLOAD_STATS_H_
#define VISMOE_ENGINE_OFFLOAD_OFFLOAD_STATS_H_

#include <cstdint>

namespace vismoe {

// Offload counters of one request (the per-request slice of StatsSink).
struct OffloadStats {
  uint64_t cache_queries = 0;
  uint64_t cache_hits = 0;
  uint64_t prefetch_needed = 0;    // activated experts outside the pinned prefix
  uint64_t prefetch_recalled = 0;  // of those, resident or in flight when needed
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;
  uint64_t bytes_h2d = 0;
  double stall_seconds = 0;
  // Per-sequence preload (preload_set.h): experts copied in for a sequence's
  // preferred set; of those, used by a later step while kept; and lookups
  // (outside the pinned prefix) of an expert kept for a running sequence,
  // hit or not: how much of the routing the preferred sets cover.
  uint64_t preload_issued = 0;
  uint64_t preload_used = 0;
  uint64_t preload_kept_lookups = 0;
  // Experts computed on the host instead of copied (miss policy cpu, static
  // host layers; engine/policy/host_experts.md), and their bytes not copied.
  uint64_t experts_host_computed = 0;
  uint64_t bytes_not_copied = 0;

  // Adds another slice's counters (a request's steps, a run's requests).
  void Add(const OffloadStats& o) {
    cache_queries += o.cache_queries;
    cache_hits += o.cache_hits;
    prefetch_needed += o.prefetch_needed;
    prefetch_recalled += o.prefetch_recalled;
    prefetch_issued += o.prefetch_issued;
    prefetch_used += o.prefetch_used;
    bytes_h2d += o.bytes_h2d;
    stall_seconds += o.stall_seconds;
    preload_issued += o.preload_issued;
    preload_used += o.preload_used;
    preload_kept_lookups += o.preload_kept_lookups;
    experts_host_computed += o.experts_host_computed;
    bytes_not_copied += o.bytes_not_copied;
  }
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_OFFLOAD_STATS_H_
