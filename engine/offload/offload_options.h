// OffloadOptions: the knobs of the offload runtime (plain values; part of
// EngineOptions and the vismoe-bench / server flags).
#ifndef VISMOE_ENGINE_OFFLOAD_OFFLOAD_OPTIONS_H_
#define VISMOE_ENGINE_OFFLOAD_OFFLOAD_OPTIONS_H_

#include <cstdint>
#include <string>

namespace vismoe {

struct OffloadOptions {
  int pinned_layers = -1;                 // MoE layers in the pinned prefix; -1 = Eq. 10
  double copy_bandwidth_bytes_per_s = 0;  // CPU backend copy throttle; 0 = unthrottled
  std::string eviction = "lru";           // lru | lfu | guarded
  // Expert predictor driving prefetch and guarded eviction:
  // none | history | router-lookahead | mlp-lookahead (needs a calibration profile).
  std::string prefetch = "none";
  int prefetch_count = 0;      // B: experts prefetched per layer; 0 = top-k
  int lookahead_window = 5;    // W: MoE layers a lookahead predictor scores ahead
  double history_decay = 0.8;             // history predictor decay per step
  int64_t activation_bytes = 0;           // reserved in the plan for activations
  // Where expert copies are read from (engine/offload/host_store_mode.h):
  // "mapped" straight from the mmapped checkpoint (no second host copy),
  // "packed" from a packed copy (page-locked on CUDA), "auto" packs only a
  // page-locked copy that fits the host's available memory with room to spare.
  std::string host_experts = "auto";
  // The dtype experts are kept in: "auto" (the checkpoint's, or what the
  // backend reads) | "fp8" (block-quantised at load; engine/offload/expert_dtype.h).
  std::string expert_dtype = "auto";
  // Per-sequence preload (MELINOE; engine/policy/preload.md): "none" |
  // "prefill-routing" (after a sequence's prefill, its top preload_experts
  // experts per offloaded layer by prefill routing mass are copied in and kept
  // for it until it ends). preload_experts 0 = the model's top-k.
  // preload_share: the fraction of the slab cache the running sequences'
  // preferred experts may hold together, in (0, 1].
  std::string preload = "none";
  int preload_experts = 0;
  double preload_share = 0.5;
  // What an offloaded MoE layer does about a routed expert that is neither
  // resident nor in flight (MissPolicy): "fetch" copies it in and waits for it
  // (the exact path); "cpu" computes it on the host from the host expert store
  // when the measured host time for its routed tokens is below its copy time
  // at the measured bandwidth (engine/policy/host_experts.md; exact); "commit"
  // (paper 003, lossy) computes an uncertain decode token with experts the
  // predictor chose that are there instead (EngineOptions::commit; needs an
  // expert predictor; a request may turn it on or off, see PolicyOverrides).
  std::string miss_policy = "fetch";
  // Static host placement, like llama.cpp's --n-cpu-moe: the experts of the
  // last N MoE layers are always computed on the host, never copied or
  // prefetched. REQUIRES N <= the offloaded (not pinned) MoE layers; 0 = none.
  int host_moe_layers = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_OFFLOAD_OPTIONS_H_
