#include "engine/model/bpe_model.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/model/byte_level.h"

namespace vismoe {
namespace {

uint64_t PairKey(int a, int b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

absl::Status BadField(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: model.", field, " ", why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& spec) {
  if (!spec.is_object()) return BadField("", "must be an object");
  const std::string type = spec.value("type", std::string("BPE"));
  if (type != "BPE") {
    return absl::UnimplementedError(absl::StrCat("tokenizer.json: unsupported model.type \"", type,
                                                 "\" (only BPE is supported)"));
  }
  // Options that change BPE output and that byte-level BPE does not use.
  if (spec.contains("dropout") && !spec["dropout"].is_null() &&
      !(spec["dropout"].is_number() && spec["dropout"].get<double>() == 0.0)) {
    return absl::UnimplementedError("tokenizer.json: model.dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (spec.contains(key) && !spec[key].is_null() &&
        !(spec[key].is_string() && spec[key].get<std::string>().empty())) {
      return absl::UnimplementedError(
          absl::StrCat("tokenizer.json: model.", key, " is not supported by byte-level BPE"));
    }
  }
  if (spec.value("byte_fallback", false)) {
    return absl::UnimplementedError("tokenizer.json: model.byte_fallback is not supported");
  }
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  model->ignore_merges_ = spec.value("ignore_merges", false);

  const auto vocab = spec.find("vocab");
  if (vocab == spec.end() || !vocab->is_object()) return BadField("vocab", "must be an object");
  model->token_to_id_.reserve(vocab->size());
  int max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30)) {
      return BadField(absl::StrCat("vocab[\"", it.key(), "\"]"), "must be a non-negative id");
    }
    const int id = it.value().get<int>();
    model->token_to_id_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  model->id_to_token_.resize(static_cast<size_t>(max_id) + 1);
  for (const auto& [token, id] : model->token_to_id_) model->id_to_token_[id] = token;

  const auto merges = spec.find("merges");
  if (merges == spec.end() || !merges->is_array()) return BadField("merges", "must be an array");
  model->merges_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const auto& m = (*merges)[rank];
    std::string left, right;
    if (m.is_string()) {
      // Legacy form "left right"; byte-level tokens never contain ' '.
      std::vector<std::string> parts = absl::StrSplit(m.get<std::string>(), ' ');
      if (parts.size() != 2) {
        return BadField(absl::StrCat("merges[", rank, "]"), "must be \"left right\"");
      }
      left = std::move(parts[0]);
      right = std::move(parts[1]);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return BadField(absl::StrCat("merges[", rank, "]"),
                      "must be \"left right\" or [\"left\", \"right\"]");
    }
    const int a = model->TokenToId(left);
    const int b = model->TokenToId(right);
    const int merged = model->TokenToId(left + right);
    if (a < 0 || b < 0 || merged < 0) {
      return BadField(absl::StrCat("merges[", rank, "]"),
                      absl::StrCat("(\"", left, "\", \"", right, "\") uses a token not in vocab"));
    }
    // As in tokenizers (collected into a map), a repeated pair keeps its last rank.
    model->merges_.insert_or_assign(PairKey(a, b), std::make_pair(static_cast<int>(rank), merged));
  }

  const auto unk = spec.find("unk_token");
  if (unk != spec.end() && unk->is_string()) {
    model->unk_id_ = model->TokenToId(unk->get<std::string>());
    if (model->unk_id_ < 0) return BadField("unk_token", "is not in vocab");
  }
  for (int b = 0; b < 256; ++b) {
    model->byte_ids_[b] = model->TokenToId(byte_level::ByteToUtf8()[b]);
  }
  return model;
}

int BpeModel::TokenToId(absl::string_view token) const {
  const auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string& BpeModel::IdToToken(int id) const {
  static const std::string* const kEmpty = new std::string();
  return id >= 0 && id < size() ? id_to_token_[id] : *kEmpty;
}

void BpeModel::EncodeWord(absl::string_view bytes, std::vector<int>* ids) const {
  if (bytes.empty()) return;
  const bool cacheable = bytes.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    const auto it = cache_.find(bytes);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> word;
  MergeWord(bytes, &word);
  ids->insert(ids->end(), word.begin(), word.end());
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();  // bounded; hot words return quickly
    cache_.try_emplace(bytes, std::move(word));
  }
}

void BpeModel::MergeWord(absl::string_view bytes, std::vector<int>* ids) const {
  if (ignore_merges_) {
    const int whole = TokenToId(byte_level::Encode(bytes));
    if (whole >= 0) {
      ids->push_back(whole);
      return;
    }
  }
  struct Symbol {
    int id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(bytes.size());
  for (const char c : bytes) {
    int id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) {
      if (unk_id_ < 0) continue;  // tokenizers drops characters it cannot map
      id = unk_id_;
    }
    const int pos = static_cast<int>(symbols.size());
    symbols.push_back({id, pos - 1, pos + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Merge {
    int rank;
    int pos;
    int new_id;
  };
  const auto worse = [](const Merge& x, const Merge& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::priority_queue<Merge, std::vector<Merge>, decltype(worse)> queue(worse);
  const auto push_pair = [&](int pos) {
    const int next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int right_pos = left.next;
    // Skip entries made stale by an earlier merge at this position.
    const auto it = merges_.find(PairKey(left.id, symbols[right_pos].id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;
    left.id = top.new_id;
    symbols[right_pos].alive = false;
    left.next = symbols[right_pos].next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int pos = 0; pos >= 0; pos = symbols[pos].next) ids->push_back(symbols[pos].id);
}

}  // namespace vismoe
