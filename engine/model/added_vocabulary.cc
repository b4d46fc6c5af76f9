#include "engine/model/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/utf8.h"

namespace vismoe {
namespace {

// Unicode White_Space (Rust's char::is_whitespace and regex \s).
bool IsWhiteSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Unicode \w: letters, marks, numbers and connector punctuation.
bool IsWordChar(uint32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Start of the code point that ends right before `end` (REQUIRES: end > 0).
size_t PrevCharStart(absl::string_view s, size_t end) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

uint32_t CodePointAt(absl::string_view s, size_t pos) {
  const utf8::Unit u = utf8::ScanUnit(s, pos);
  return u.kind == utf8::Unit::Kind::kValid ? utf8::DecodeAt(s, pos, u.length) : 0xFFFD;
}

absl::StatusOr<bool> Flag(const nlohmann::json& t, const char* key, bool fallback, size_t index) {
  const auto it = t.find(key);
  if (it == t.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: added_tokens[", index, "].", key, " must be a boolean"));
  }
  return it->get<bool>();
}

}  // namespace

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const nlohmann::json& spec,
                                                          const Normalizer& normalizer) {
  AddedVocabulary v;
  if (spec.is_null()) return v;
  if (!spec.is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: added_tokens must be an array");
  }
  for (size_t i = 0; i < spec.size(); ++i) {
    const auto& t = spec[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() > (1 << 30) ||
        !t.contains("content") || !t["content"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: added_tokens[", i, "] needs an integer \"id\" and string \"content\""));
    }
    AddedToken token;
    token.id = t["id"].get<int>();
    token.content = t["content"].get<std::string>();
    if (token.content.empty() || !utf8::IsValid(token.content)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: added_tokens[", i, "].content is empty or not UTF-8"));
    }
    auto flag = [&](const char* key, bool fallback, bool* out) -> absl::Status {
      auto value = Flag(t, key, fallback, i);
      if (!value.ok()) return value.status();
      *out = *value;
      return absl::OkStatus();
    };
    for (const auto& s :
         {flag("single_word", false, &token.single_word), flag("lstrip", false, &token.lstrip),
          flag("rstrip", false, &token.rstrip), flag("special", false, &token.special)}) {
      if (!s.ok()) return s;
    }
    // tokenizers' default: special tokens are not normalised, others are.
    if (auto s = flag("normalized", !token.special, &token.normalized); !s.ok()) return s;
    if (v.by_content_.contains(token.content) || v.by_id_.contains(token.id)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: added_tokens[", i,
                                                     "] repeats id ", token.id, " or content \"",
                                                     token.content, "\""));
    }
    const int index = static_cast<int>(v.tokens_.size());
    v.by_id_[token.id] = index;
    v.by_content_[token.content] = index;
    v.tokens_.push_back(std::move(token));
  }
  for (Matcher* m : {&v.raw_, &v.normalized_}) m->patterns.resize(v.tokens_.size());
  for (int i = 0; i < static_cast<int>(v.tokens_.size()); ++i) {
    const AddedToken& token = v.tokens_[i];
    Matcher& m = token.normalized ? v.normalized_ : v.raw_;
    std::string pattern = token.normalized ? normalizer.Apply(token.content) : token.content;
    if (pattern.empty()) continue;
    m.by_first_byte[static_cast<uint8_t>(pattern[0])].push_back(i);
    m.patterns[i] = std::move(pattern);
    m.empty = false;
  }
  for (Matcher* m : {&v.raw_, &v.normalized_}) {
    for (auto& bucket : m->by_first_byte) {
      std::stable_sort(bucket.begin(), bucket.end(),
                       [m](int a, int b) { return m->patterns[a].size() > m->patterns[b].size(); });
    }
  }
  return v;
}

const AddedToken* AddedVocabulary::FindById(int id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindByContent(absl::string_view content) const {
  const auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::Split(absl::string_view text, bool normalized_pass,
                            std::vector<Segment>* out) const {
  const Matcher& m = normalized_pass ? normalized_ : raw_;
  if (m.empty) {
    if (!text.empty()) out->push_back({0, text.size(), -1});
    return;
  }
  FindMatches(text, m, out);
}

void AddedVocabulary::FindMatches(absl::string_view text, const Matcher& m,
                                  std::vector<Segment>* out) const {
  size_t start_offset = 0;  // end of the last emitted segment
  size_t search = 0;        // where the (non-overlapping) match scan resumes
  while (search < text.size()) {
    // Leftmost-longest: the first position with any match, longest there.
    int found = -1;
    size_t pos = search;
    for (; pos < text.size(); ++pos) {
      for (const int i : m.by_first_byte[static_cast<uint8_t>(text[pos])]) {
        if (absl::StartsWith(text.substr(pos), m.patterns[i])) {
          found = i;
          break;
        }
      }
      if (found >= 0) break;
    }
    if (found < 0) break;
    const AddedToken& token = tokens_[found];
    size_t start = pos;
    size_t stop = pos + m.patterns[found].size();
    search = stop;
    if (token.single_word) {
      const bool start_space =
          start == 0 || !IsWordChar(CodePointAt(text, PrevCharStart(text, start)));
      const bool stop_space = stop == text.size() || !IsWordChar(CodePointAt(text, stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        const size_t p = PrevCharStart(text, s);
        if (!IsWhiteSpace(CodePointAt(text, p))) break;
        s = p;
      }
      start = s;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        const utf8::Unit u = utf8::ScanUnit(text, stop);
        if (u.kind != utf8::Unit::Kind::kValid ||
            !IsWhiteSpace(utf8::DecodeAt(text, stop, u.length))) {
          break;
        }
        stop += u.length;
      }
    }
    start = std::max(start, start_offset);
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, token.id});
    start_offset = stop;
    search = std::max(search, stop);
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

}  // namespace vismoe
