// KvPool: the KV cache memory of a model, allocated once: `total_blocks`
// blocks, each holding `block_tokens` token rows of every decoder layer's keys
// and values, and the free list the blocks are handed out from. A sequence's
// KvCache holds a block table (the blocks of its rows, in token order), so
// sequences of any length share one allocation and a sequence grows a block
// at a time (vLLM's paged attention).
//
// Layout: [layer][K|V][block][block_tokens][row_elems], so block b of a
// layer's keys starts b * block_elems() elements after Keys(layer). A pool of
// one plane per layer (planes() == 1: multi-head latent attention, whose row
// is the latent and the rope key, TextConfig::KvRowElems) has keys only. This class
// keeps the rows in host memory (fp32, the CPU backend's); the CUDA backend's
// pool (cuda::DeviceKvPool) derives from it for the free list and keeps its
// rows (bf16) in one device allocation.
//
// Thread safety: Allocate, Free and the counters may be called from any
// thread (a mutex guards the free list); a block's rows belong to the cache
// that holds the block.
// Ownership: owns its rows; the caches borrow the pool and must not outlive it.
#ifndef VISMOE_ENGINE_BACKEND_KV_POOL_H_
#define VISMOE_ENGINE_BACKEND_KV_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace vismoe {

class KvPool {
 public:
  // Tokens a block holds unless a caller chooses otherwise.
  static constexpr int64_t kDefaultBlockTokens = 16;

  // Host fp32 rows. REQUIRES: all arguments > 0, total_blocks < 2^31,
  // planes 1 or 2.
  KvPool(int num_layers, int64_t total_blocks, int64_t block_tokens, int64_t row_elems,
         int planes = 2);
  virtual ~KvPool() = default;
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int num_layers() const { return num_layers_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t row_elems() const { return row_elems_; }
  int planes() const { return planes_; }
  // Elements of one block of one layer's keys (or values).
  int64_t block_elems() const { return block_tokens_ * row_elems_; }
  // Blocks that hold `tokens` tokens.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }
  int64_t free_blocks() const;
  int64_t used_blocks() const { return total_blocks_ - free_blocks(); }

  // Appends `count` free blocks to `blocks`; ResourceExhausted (naming the
  // pool's sizes) and nothing taken when fewer are free.
  absl::Status Allocate(int64_t count, std::vector<int32_t>* blocks);
  // Gives blocks back. REQUIRES: each came from Allocate and is not free.
  void Free(absl::Span<const int32_t> blocks);

  // True when the rows live in this object (host memory), false for a
  // device subclass.
  bool has_host_rows() const { return rows_ != nullptr; }
  // REQUIRES (Keys, Values): host rows, 0 <= layer < num_layers(); Values:
  // planes() == 2.
  float* Keys(int layer) const { return Plane(layer, 0); }
  float* Values(int layer) const { return Plane(layer, 1); }
  // Bytes of one block over every layer and plane.
  virtual int64_t block_bytes() const;
  // Bytes of the whole pool.
  int64_t bytes() const { return total_blocks_ * block_bytes(); }

 protected:
  struct NoHostRows {};
  // Bookkeeping only: a subclass keeps the rows elsewhere.
  KvPool(int num_layers, int64_t total_blocks, int64_t block_tokens, int64_t row_elems, NoHostRows,
         int planes = 2);

 private:
  float* Plane(int layer, int kv) const {
    return rows_.get() +
           (static_cast<int64_t>(layer) * planes_ + kv) * total_blocks_ * block_elems();
  }

  const int num_layers_;
  const int64_t total_blocks_;
  const int64_t block_tokens_;
  const int64_t row_elems_;
  const int planes_;
  std::unique_ptr<float[]> rows_;  // null in a device subclass
  mutable absl::Mutex mu_;
  // Free blocks, a stack: the block freed last is handed out first (warm
  // pages), and a fresh pool hands out 0, 1, 2, ...
  std::vector<int32_t> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKEND_KV_POOL_H_
