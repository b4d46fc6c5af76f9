// KvBlockPool: the engine's KV cache budget, counted in fixed-size blocks of
// tokens. A sequence reserves the blocks for every token it may hold (its
// prompt plus max_new_tokens, capped at the context) when it is admitted and
// returns them when it leaves, so admission is by free blocks and a running
// sequence can never run out of room. The sum of the reservations bounds the
// KV memory the memory plan set aside (kv_cache_bytes = total_tokens rows).
// Each sequence's rows are still one allocation of its reserved size (the
// attention kernels read contiguous rows); block tables shared between
// sequences, growth on demand and preemption are not built yet.
//
// Thread safety: none; used by the engine's step thread (the gauges it feeds
// are read through StatsSink).
#ifndef VISMOE_ENGINE_RUNTIME_KV_BLOCK_POOL_H_
#define VISMOE_ENGINE_RUNTIME_KV_BLOCK_POOL_H_

#include <cstdint>

namespace vismoe {

class KvBlockPool {
 public:
  // total_tokens rounded up to whole blocks. REQUIRES: both >= 1.
  KvBlockPool(int64_t total_tokens, int64_t block_tokens)
      : block_tokens_(block_tokens),
        total_blocks_((total_tokens + block_tokens - 1) / block_tokens) {}

  int64_t block_tokens() const { return block_tokens_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t used_blocks() const { return used_blocks_; }
  // Blocks that hold `tokens` tokens.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }
  // Takes `blocks` if that many are free.
  bool TryReserve(int64_t blocks) {
    if (blocks > total_blocks_ - used_blocks_) return false;
    used_blocks_ += blocks;
    return true;
  }
  // REQUIRES: `blocks` were reserved and not yet released.
  void Release(int64_t blocks) { used_blocks_ -= blocks; }

 private:
  int64_t block_tokens_;
  int64_t total_blocks_;
  int64_t used_blocks_ = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_KV_BLOCK_POOL_H_
