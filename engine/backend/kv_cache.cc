#include "engine/backend/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vismoe {

KvCache::KvCache(int num_layers, int64_t capacity, int64_t row_elems)
    : capacity_(capacity), row_elems_(row_elems), dropped_(num_layers, 0) {
  for (int l = 0; l < num_layers; ++l) {
    // Default-initialised (not zeroed): untouched pages cost no memory.
    keys_.emplace_back(new float[static_cast<size_t>(capacity * row_elems)]);
    values_.emplace_back(new float[static_cast<size_t>(capacity * row_elems)]);
  }
}

KvCache::KvCache(int num_layers, int64_t capacity, int64_t row_elems, NoHostRows)
    : capacity_(capacity), row_elems_(row_elems), dropped_(num_layers, 0) {}

absl::Status KvCache::CheckRoom(int64_t n) const {
  if (n < 0 || length_ + n > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: ", length_, " tokens + ", n,
                                                     " new exceed the capacity of ", capacity_,
                                                     " (EngineOptions::max_context_tokens)"));
  }
  return absl::OkStatus();
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

int64_t KvCache::bytes() const {
  return 2 * static_cast<int64_t>(keys_.size()) * capacity_ * row_elems_ *
         static_cast<int64_t>(sizeof(float));
}

}  // namespace vismoe
