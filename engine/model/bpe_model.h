// Byte-level BPE model of a Hugging Face tokenizer.json ("model" field, type
// BPE): vocabulary, ranked merges and the merge loop of tokenizers' Word::
// merge_all (lowest rank first, leftmost on ties). Works on raw bytes: each
// byte starts as the vocabulary id of its GPT-2 byte-level character.
// Thread-safe: the vocabulary is immutable and the word cache is guarded by
// a mutex.
#ifndef VISMOE_ENGINE_MODEL_BPE_MODEL_H_
#define VISMOE_ENGINE_MODEL_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace vismoe {

class BpeModel {
 public:
  // `spec` is the JSON value of the "model" field.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& spec);

  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one pre-tokenised piece given as raw bytes.
  void EncodeWord(absl::string_view bytes, std::vector<int>* ids) const;

  // Vocabulary lookups (model vocabulary only, no added tokens).
  int TokenToId(absl::string_view token) const;  // -1 if absent
  // Empty string if absent.
  const std::string& IdToToken(int id) const;
  // Largest id in the vocabulary + 1.
  int size() const { return static_cast<int>(id_to_token_.size()); }

 private:
  BpeModel() = default;
  void MergeWord(absl::string_view bytes, std::vector<int>* ids) const;

  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;

  absl::flat_hash_map<std::string, int> token_to_id_;
  std::vector<std::string> id_to_token_;
  // (left id, right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int, int>> merges_;
  std::array<int, 256> byte_ids_{};  // id of each byte's character, -1 if none
  int unk_id_ = -1;
  bool ignore_merges_ = false;

  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_BPE_MODEL_H_
