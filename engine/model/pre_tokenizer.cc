#include "engine/model/pre_tokenizer.h"

#include <algorithm>
#include <optional>
#include <utility>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/utf8.h"

namespace vismoe {
namespace {

using Range = std::pair<size_t, size_t>;

// The pattern ByteLevel(use_regex=true) splits with (GPT-2).
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled PCRE2 pattern, UTF + Unicode properties, JIT when available.
class Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern, bool literal,
                                                        const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // PCRE2_LITERAL admits no other pattern options than UTF.
    const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     options, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json: ", where, ": pattern \"", pattern, "\" does not compile at offset ",
          offset, ": ", reinterpret_cast<const char*>(message)));
    }
    // JIT is an optimisation only: without it pcre2_match interprets.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return std::unique_ptr<Regex>(new Regex(code));
  }

  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match, left to right, with the iteration rules of
  // Rust's onig/regex find_iter: an empty match right after the previous
  // match is skipped.
  std::vector<Range> FindAll(absl::string_view text) const {
    std::vector<Range> matches;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::optional<size_t> last_end;
    size_t search = 0;
    while (search <= text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), search, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // Deep backtracking on a long run: the interpreter uses the heap.
        rc = pcre2_match(code_, subject, text.size(), search, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         nullptr);
      }
      if (rc < 0) break;  // no match (or a resource limit: the rest is a gap)
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t s = ov[0], e = ov[1];
      if (s == e && last_end == e) {
        if (search >= text.size()) break;
        search += utf8::ScanUnit(text, search).length;
        continue;
      }
      matches.emplace_back(s, e);
      last_end = e;
      search = e;
    }
    pcre2_match_data_free(md);
    return matches;
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// (range, is_match) pieces covering the text, as tokenizers' Pattern gives them.
std::vector<std::pair<Range, bool>> Cover(absl::string_view text, const std::vector<Range>& m) {
  std::vector<std::pair<Range, bool>> out;
  if (text.empty()) return {{{0, 0}, false}};
  size_t prev = 0;
  for (const Range& r : m) {
    if (prev != r.first) out.push_back({{prev, r.first}, false});
    out.push_back({r, true});
    prev = r.second;
  }
  if (prev != text.size()) out.push_back({{prev, text.size()}, false});
  return out;
}

// Applies a split behaviour (tokenizers' NormalizedString::split).
std::vector<Range> ApplyBehavior(std::vector<std::pair<Range, bool>> m, Behavior behavior) {
  std::vector<std::pair<Range, bool>> acc;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      acc = std::move(m);
      break;
    case Behavior::kRemoved:
      for (auto& p : m) {
        if (!p.second) acc.push_back(p);
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (auto& p : m) {
        if (p.second && !previous_match && !acc.empty()) {
          acc.back().first.second = p.first.second;
        } else {
          acc.push_back(p);
        }
        previous_match = p.second;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->second && !previous_match && !acc.empty()) {
          acc.back().first.first = it->first.first;
        } else {
          acc.push_back(*it);
        }
        previous_match = it->second;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    case Behavior::kContiguous:
      for (auto& p : m) {
        if (p.second == previous_match && !acc.empty()) {
          acc.back().first.second = p.first.second;
        } else {
          acc.push_back(p);
        }
        previous_match = p.second;
      }
      break;
  }
  std::vector<Range> out;
  for (const auto& p : acc) {
    if (p.first.second > p.first.first) out.push_back(p.first);
  }
  return out;
}

}  // namespace

class PreTokenizer::Step {
 public:
  Step(std::unique_ptr<Regex> regex, Behavior behavior, bool invert, bool prefix_space)
      : regex_(std::move(regex)),
        behavior_(behavior),
        invert_(invert),
        prefix_space_(prefix_space) {}

  void Apply(std::string piece, std::vector<std::string>* out) const {
    if (prefix_space_ && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
    if (regex_ == nullptr) {
      if (!piece.empty()) out->push_back(std::move(piece));
      return;
    }
    auto cover = Cover(piece, regex_->FindAll(piece));
    if (invert_) {
      for (auto& p : cover) p.second = !p.second;
    }
    for (const Range& r : ApplyBehavior(std::move(cover), behavior_)) {
      out->push_back(piece.substr(r.first, r.second - r.first));
    }
  }

 private:
  std::unique_ptr<Regex> regex_;  // null: no split
  Behavior behavior_;
  bool invert_;
  bool prefix_space_;
};

namespace {

absl::StatusOr<bool> OptionalBool(const nlohmann::json& spec, const char* key, bool fallback,
                                  const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: ", where, ".", key, " must be a boolean"));
  }
  return it->get<bool>();
}

absl::StatusOr<std::unique_ptr<PreTokenizer::Step>> ParseSplit(const nlohmann::json& spec,
                                                               const std::string& where) {
  const auto pattern = spec.find("pattern");
  if (pattern == spec.end() || !pattern->is_object() || pattern->size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.json: ", where, ".pattern must be {\"Regex\": ...} or {\"String\": ...}"));
  }
  const bool literal = pattern->contains("String");
  const auto& text = literal ? (*pattern)["String"] : pattern->value("Regex", nlohmann::json());
  if (!text.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.json: ", where, ".pattern must be {\"Regex\": ...} or {\"String\": ...}"));
  }
  VISMOE_ASSIGN_OR_RETURN(auto regex,
                          Regex::Compile(text.get<std::string>(), literal, where + ".pattern"));
  const std::string behavior = spec.value("behavior", std::string());
  Behavior b;
  if (behavior == "Isolated") {
    b = Behavior::kIsolated;
  } else if (behavior == "Removed") {
    b = Behavior::kRemoved;
  } else if (behavior == "MergedWithPrevious") {
    b = Behavior::kMergedWithPrevious;
  } else if (behavior == "MergedWithNext") {
    b = Behavior::kMergedWithNext;
  } else if (behavior == "Contiguous") {
    b = Behavior::kContiguous;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: unsupported ", where, ".behavior \"", behavior, "\""));
  }
  VISMOE_ASSIGN_OR_RETURN(const bool invert, OptionalBool(spec, "invert", false, where));
  return std::make_unique<PreTokenizer::Step>(std::move(regex), b, invert, false);
}

absl::StatusOr<std::unique_ptr<PreTokenizer::Step>> ParseByteLevel(const nlohmann::json& spec,
                                                                   const std::string& where) {
  VISMOE_ASSIGN_OR_RETURN(const bool prefix, OptionalBool(spec, "add_prefix_space", true, where));
  VISMOE_ASSIGN_OR_RETURN(const bool use_regex, OptionalBool(spec, "use_regex", true, where));
  std::unique_ptr<Regex> regex;
  if (use_regex) {
    VISMOE_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern, false, where));
  }
  return std::make_unique<PreTokenizer::Step>(std::move(regex), Behavior::kIsolated, false, prefix);
}

}  // namespace

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const nlohmann::json& spec) {
  std::vector<std::pair<nlohmann::json, std::string>> flat;  // (step, where)
  if (spec.is_object() && spec.value("type", std::string()) == "Sequence") {
    const auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          "tokenizer.json: pre_tokenizer.pretokenizers must be an array");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      flat.emplace_back((*it)[i], absl::StrCat("pre_tokenizer.pretokenizers[", i, "]"));
    }
  } else {
    flat.emplace_back(spec, "pre_tokenizer");
  }
  auto pre = std::unique_ptr<PreTokenizer>(new PreTokenizer());
  bool saw_byte_level = false;
  for (const auto& [step, where] : flat) {
    if (!step.is_object() || !step.contains("type") || !step["type"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: ", where,
                       " must be an object with a string \"type\" (byte-level BPE "
                       "needs a ByteLevel pre_tokenizer)"));
    }
    const std::string type = step["type"].get<std::string>();
    if (saw_byte_level) {
      return absl::UnimplementedError(absl::StrCat("tokenizer.json: ", where, ".type \"", type,
                                                   "\" after ByteLevel is not supported"));
    }
    std::unique_ptr<Step> parsed;
    if (type == "Split") {
      VISMOE_ASSIGN_OR_RETURN(parsed, ParseSplit(step, where));
    } else if (type == "ByteLevel") {
      VISMOE_ASSIGN_OR_RETURN(parsed, ParseByteLevel(step, where));
      saw_byte_level = true;
    } else {
      return absl::UnimplementedError(absl::StrCat("tokenizer.json: unsupported ", where,
                                                   ".type \"", type,
                                                   "\" (supported: Sequence, Split, ByteLevel)"));
    }
    pre->steps_.push_back(std::move(parsed));
  }
  if (!saw_byte_level) {
    return absl::UnimplementedError(
        "tokenizer.json: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
  }
  return pre;
}

void PreTokenizer::Split(absl::string_view text, std::vector<std::string>* pieces) const {
  std::vector<std::string> current{std::string(text)};
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    for (std::string& piece : current) step->Apply(std::move(piece), &next);
    current.swap(next);
  }
  for (std::string& piece : current) pieces->push_back(std::move(piece));
}

}  // namespace vismoe
