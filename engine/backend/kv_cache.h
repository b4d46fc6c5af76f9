// KvCache: the key/value cache of one sequence, per decoder layer: a block
// table over a KvPool (engine/backend/kv_pool.h). Token row t of a layer lives
// in row t % block_tokens of block blocks()[t / block_tokens], every layer
// through the same table; the rows are the pool's (host fp32 on the CPU
// backend, device bf16 on CUDA), so one cache type serves every backend.
//
// Protocol per forward step of n tokens: CheckRoom(n) (the sequence's own
// limit) and Reserve(length() + n) (blocks from the pool); each layer writes
// rows [layer_length(l), layer_length(l) + n); Advance(n) at the end. A cache
// grows a block at a time; Release() gives every block back (a preempted
// sequence recomputes its rows later).
// Token compression (VisMMOE 3.2) drops visual tokens from decoder layer
// `from_layer` on, so those layers hold fewer rows than the sequence has
// tokens: the step then ends with Advance(n, from_layer, kept) instead.
// length() is always the number of tokens in the sequence (what positions
// count), and layer_length(l) the rows layer l holds (== length() without
// compression). The table is shared by all layers and sized by length(), so
// a compressed layer leaves the slots of its dropped rows unused.
// Thread safety: none; owned by the one thread running the sequence.
// Ownership: borrows its pool (or owns one of its own); frees its blocks on
// destruction.
#ifndef VISMOE_ENGINE_BACKEND_KV_CACHE_H_
#define VISMOE_ENGINE_BACKEND_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/kv_pool.h"

namespace vismoe {

class KvCache {
 public:
  // At most `capacity` tokens in blocks of `pool`, which must outlive the
  // cache. REQUIRES: pool non-null, capacity > 0.
  KvCache(KvPool* pool, int64_t capacity);
  // With a pool of its own, every block of which it holds from the start
  // (one sequence alone: tools, tests; `own` sized for `capacity` tokens).
  // REQUIRES: own non-null, capacity > 0.
  KvCache(std::unique_ptr<KvPool> own, int64_t capacity);
  // The same with a host pool of KvPool::kDefaultBlockTokens-token blocks.
  // REQUIRES: all arguments > 0.
  KvCache(int num_layers, int64_t capacity, int64_t row_elems);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t capacity() const { return capacity_; }
  // Tokens in the sequence (the rows of every uncompressed layer).
  int64_t length() const { return length_; }
  // Rows held by `layer`. REQUIRES: 0 <= layer < num_layers.
  int64_t layer_length(int layer) const { return length_ - dropped_[layer]; }
  int64_t row_elems() const { return pool_->row_elems(); }
  int num_layers() const { return static_cast<int>(dropped_.size()); }
  KvPool* pool() const { return pool_; }

  // ResourceExhausted (naming the sizes) if n more tokens exceed capacity().
  absl::Status CheckRoom(int64_t n) const;
  // Holds blocks for `tokens` tokens (takes the missing ones from the pool;
  // a no-op when it holds enough). ResourceExhausted, with nothing taken,
  // when the pool has too few free blocks.
  absl::Status Reserve(int64_t tokens);
  // Tokens the blocks held can take.
  int64_t reserved_tokens() const {
    return static_cast<int64_t>(blocks_.size()) * pool_->block_tokens();
  }
  // The block table: block i holds tokens [i * block_tokens, (i + 1) * block_tokens).
  const std::vector<int32_t>& blocks() const { return blocks_; }
  // Gives every block back to the pool and forgets every token.
  void Release();

  bool has_host_rows() const { return pool_->has_host_rows(); }
  // REQUIRES (KeyRow, ValueRow): host rows, 0 <= t < reserved_tokens(),
  // 0 <= layer < num_layers.
  float* KeyRow(int layer, int64_t t) const { return pool_->Keys(layer) + RowOffset(t); }
  float* ValueRow(int layer, int64_t t) const { return pool_->Values(layer) + RowOffset(t); }
  // REQUIRES: CheckRoom(n) was OK and Reserve(length() + n) too.
  void Advance(int64_t n) { length_ += n; }
  // Ends a step in which layers >= from_layer stored only `kept` of the n new
  // tokens. REQUIRES: as Advance(n), and 0 <= kept <= n.
  void Advance(int64_t n, int from_layer, int64_t kept);
  // Forgets every token; keeps its blocks.
  void Clear();
  // Bytes the blocks of capacity() tokens take in the pool.
  int64_t bytes() const { return pool_->BlocksFor(capacity_) * pool_->block_bytes(); }

 private:
  int64_t RowOffset(int64_t t) const {
    const int64_t bt = pool_->block_tokens();
    return blocks_[t / bt] * pool_->block_elems() + (t % bt) * pool_->row_elems();
  }

  std::unique_ptr<KvPool> own_pool_;  // null when borrowing
  KvPool* pool_;
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<int64_t> dropped_;  // per layer: tokens of the sequence it does not hold
  std::vector<int32_t> blocks_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKEND_KV_CACHE_H_
