// KvCache: the fp32 key/value cache of one sequence, per decoder layer.
//
// Row t of layer l holds the (rotated) keys / values of token t for all KV
// heads: [capacity, num_kv_heads * head_dim]. Memory for the full capacity is
// reserved at construction (never grows on the hot path); pages are touched
// only as rows are written.
// Protocol per forward step of n tokens: CheckRoom(n); each layer writes rows
// [layer_length(l), layer_length(l) + n) through KeyRow/ValueRow; Advance(n)
// at the end.
// Token compression (VisMMOE 3.2) drops visual tokens from decoder layer
// `from_layer` on, so those layers hold fewer rows than the sequence has
// tokens: the step then ends with Advance(n, from_layer, kept) instead. length()
// is always the number of tokens in the sequence (what positions count), and
// layer_length(l) the rows layer l holds (== length() without compression).
// The CUDA backend's cache (cuda::DeviceKvCache) derives from this class for
// the bookkeeping and keeps its rows in device memory instead (no host rows).
// Thread safety: none; owned by the one thread running the sequence.
#ifndef VISMOE_ENGINE_BACKEND_KV_CACHE_H_
#define VISMOE_ENGINE_BACKEND_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"

namespace vismoe {

class KvCache {
 public:
  // REQUIRES: all arguments > 0.
  KvCache(int num_layers, int64_t capacity, int64_t row_elems);
  virtual ~KvCache() = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t capacity() const { return capacity_; }
  // Tokens in the sequence (the rows of every uncompressed layer).
  int64_t length() const { return length_; }
  // Rows held by `layer`. REQUIRES: 0 <= layer < num_layers.
  int64_t layer_length(int layer) const { return length_ - dropped_[layer]; }
  int64_t row_elems() const { return row_elems_; }

  // ResourceExhausted (naming the sizes) if n more tokens do not fit.
  absl::Status CheckRoom(int64_t n) const;
  int num_layers() const { return static_cast<int>(dropped_.size()); }
  // True when the rows live in this object (host memory), false for a device
  // subclass's bookkeeping-only base.
  bool has_host_rows() const { return !keys_.empty(); }
  // REQUIRES (KeyRow..Values): host rows (this class, not a device subclass),
  // 0 <= t < capacity(), 0 <= layer < num_layers.
  float* KeyRow(int layer, int64_t t) { return keys_[layer].get() + t * row_elems_; }
  float* ValueRow(int layer, int64_t t) { return values_[layer].get() + t * row_elems_; }
  const float* Keys(int layer) const { return keys_[layer].get(); }
  const float* Values(int layer) const { return values_[layer].get(); }
  // REQUIRES: CheckRoom(n) was OK.
  void Advance(int64_t n) { length_ += n; }
  // Ends a step in which layers >= from_layer stored only `kept` of the n new
  // tokens. REQUIRES: CheckRoom(n) was OK, 0 <= kept <= n.
  void Advance(int64_t n, int from_layer, int64_t kept);
  // Forgets every token (capacity is kept).
  void Clear();
  // Bytes reserved for keys and values of all layers.
  virtual int64_t bytes() const;

 protected:
  struct NoHostRows {};
  // Bookkeeping only: a subclass stores the rows elsewhere.
  KvCache(int num_layers, int64_t capacity, int64_t row_elems, NoHostRows);

 private:
  int64_t capacity_;
  int64_t row_elems_;
  int64_t length_ = 0;
  std::vector<int64_t> dropped_;  // per layer: tokens of the sequence it does not hold
  std::vector<std::unique_ptr<float[]>> keys_;
  std::vector<std::unique_ptr<float[]>> values_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKEND_KV_CACHE_H_
