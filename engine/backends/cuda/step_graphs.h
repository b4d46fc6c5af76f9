// StepGraphs: the CUDA graphs of the CUDA decoder's decode steps (DESIGN.md:
// the steady part of a decode step is captured once and replayed per token).
//
// A decode step -- every sequence one row, its MoE layers on DeviceMoe --
// launches the same kernels with the same arguments token after token: what
// changes (token ids, positions, each layer's cache length, the block
// tables) is staged by the step in one input block that its first node
// copies in, and the kernels read it from there. So CudaDecoderStep defers a
// decode step's ops (StepOp) as the decoder calls them; the first time it
// captures them into a graph, then it replays the graph whenever the ops the
// decoder calls equal the recorded ones, checked one by one as they come. The
// graph ends where the step first needs the host (the logits, a layer routed
// on the host): there it is launched, and the rest runs op by op. Any
// difference, or a capture that fails, runs the ops one by one instead.
// Thread safety: none; used under the decoder ops' step lock.
// Ownership: owns the graphs.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_STEP_GRAPHS_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_STEP_GRAPHS_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/device/cuda/device.h"
#include "engine/offload/expert_provider.h"

namespace vismoe::cuda {

// One op of a deferred step, with what makes its launches differ.
struct StepOp {
  enum class Kind { kBegin, kNorm, kAttention, kDeviceMoe, kDenseMlp };
  Kind kind = Kind::kBegin;
  int layer = -1;
  int arg = 0;                        // kNorm: the NormSite
  ExpertProvider* experts = nullptr;  // kDeviceMoe
  bool observed = false;              // kDeviceMoe

  bool operator==(const StepOp& o) const {
    const auto id = [](const ExpertProvider* p) { return p == nullptr ? 0 : p->instance_id(); };
    return kind == o.kind && layer == o.layer && arg == o.arg && id(experts) == id(o.experts) &&
           observed == o.observed;
  }
};

// What a step's graph depends on beyond its ops: its rows (= sequences), the
// KV pool its caches use, and the input block's layout.
struct StepGraphKey {
  int64_t rows = 0;
  const void* pool = nullptr;
  int64_t table_stride = 0;
  bool operator==(const StepGraphKey&) const = default;
};

struct StepGraph {
  StepGraphKey key;
  std::vector<StepOp> ops;
  GraphExec exec;
};

class StepGraphs {
 public:
  // At most this many graphs are kept (the oldest goes first).
  static constexpr size_t kMaxGraphs = 16;

  const StepGraph* Find(const StepGraphKey& key) const {
    for (const StepGraph& g : graphs_) {
      if (g.key == key) return &g;
    }
    return nullptr;
  }
  // Replaces the graph of `key`; returns it.
  const StepGraph* Put(const StepGraphKey& key, std::vector<StepOp> ops, GraphExec exec) {
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->key == key) {
        graphs_.erase(it);
        break;
      }
    }
    if (graphs_.size() >= kMaxGraphs) graphs_.pop_front();
    graphs_.push_back(StepGraph{key, std::move(ops), std::move(exec)});
    return &graphs_.back();
  }
  // Drops the graph of `key` (its step changed: the next one records anew).
  void Erase(const StepGraphKey& key) {
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->key == key) {
        graphs_.erase(it);
        return;
      }
    }
  }
  void Clear() { graphs_.clear(); }

 private:
  std::deque<StepGraph> graphs_;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_STEP_GRAPHS_H_
