#include "engine/backend/kv_pool.h"

#include "absl/strings/str_cat.h"

namespace vismoe {

KvPool::KvPool(int num_layers, int64_t total_blocks, int64_t block_tokens, int64_t row_elems,
               NoHostRows, int planes)
    : num_layers_(num_layers),
      total_blocks_(total_blocks),
      block_tokens_(block_tokens),
      row_elems_(row_elems),
      planes_(planes) {
  free_.reserve(static_cast<size_t>(total_blocks));
  for (int64_t b = total_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

KvPool::KvPool(int num_layers, int64_t total_blocks, int64_t block_tokens, int64_t row_elems,
               int planes)
    : KvPool(num_layers, total_blocks, block_tokens, row_elems, NoHostRows{}, planes) {
  // Default-initialised (not zeroed): pages cost memory only once written.
  rows_.reset(new float[static_cast<size_t>(planes * num_layers * total_blocks * block_elems())]);
}

int64_t KvPool::free_blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(free_.size());
}

absl::Status KvPool::Allocate(int64_t count, std::vector<int32_t>* blocks) {
  absl::MutexLock lock(&mu_);
  if (count < 0 || count > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool: ", count, " blocks asked, ", free_.size(), " of ", total_blocks_,
                     " free (", block_tokens_, " tokens each; EngineOptions::kv_cache_tokens)"));
  }
  for (int64_t i = 0; i < count; ++i) {
    blocks->push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void KvPool::Free(absl::Span<const int32_t> blocks) {
  absl::MutexLock lock(&mu_);
  // In reverse, so that a cache's first block is handed out first again.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) free_.push_back(*it);
}

int64_t KvPool::block_bytes() const {
  return planes_ * int64_t{num_layers_} * block_elems() * static_cast<int64_t>(sizeof(float));
}

}  // namespace vismoe
