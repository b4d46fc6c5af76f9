#include "engine/backend/kv_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vismoe {

KvCache::KvCache(KvPool* pool, int64_t capacity)
    : pool_(pool), capacity_(capacity), dropped_(pool->num_layers(), 0) {}

KvCache::KvCache(std::unique_ptr<KvPool> own, int64_t capacity) : KvCache(own.get(), capacity) {
  own_pool_ = std::move(own);
  // The whole pool is this cache's: hold every block from the start.
  (void)own_pool_->Allocate(own_pool_->free_blocks(), &blocks_);
}

KvCache::KvCache(int num_layers, int64_t capacity, int64_t row_elems)
    : KvCache(std::make_unique<KvPool>(
                  num_layers,
                  (capacity + KvPool::kDefaultBlockTokens - 1) / KvPool::kDefaultBlockTokens,
                  KvPool::kDefaultBlockTokens, row_elems),
              capacity) {}

KvCache::~KvCache() { Release(); }

absl::Status KvCache::CheckRoom(int64_t n) const {
  if (n < 0 || length_ + n > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: ", length_, " tokens + ", n,
                                                     " new exceed the capacity of ", capacity_,
                                                     " (EngineOptions::max_context_tokens)"));
  }
  return absl::OkStatus();
}

absl::Status KvCache::Reserve(int64_t tokens) {
  const int64_t missing = pool_->BlocksFor(tokens) - static_cast<int64_t>(blocks_.size());
  if (missing <= 0) return absl::OkStatus();
  return pool_->Allocate(missing, &blocks_);
}

void KvCache::Release() {
  pool_->Free(blocks_);
  blocks_.clear();
  Clear();
}

void KvCache::Advance(int64_t n, int from_layer, int64_t kept) {
  for (int l = std::max(from_layer, 0); l < static_cast<int>(dropped_.size()); ++l) {
    dropped_[l] += n - kept;
  }
  length_ += n;
}

void KvCache::Clear() {
  length_ = 0;
  std::fill(dropped_.begin(), dropped_.end(), 0);
}

}  // namespace vismoe
