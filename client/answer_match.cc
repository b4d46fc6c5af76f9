#include "client/answer_match.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace vismoe::client {
namespace {

// Index of a single option letter `text` (upper or lower case) or -1.
int LetterIndex(absl::string_view text, size_t num_choices) {
  if (text.size() != 1 || !absl::ascii_isalpha(text[0])) return -1;
  const int index = absl::ascii_toupper(text[0]) - 'A';
  return index < static_cast<int>(num_choices) ? index : -1;
}

// Reads a leading upper-case option letter: "B", "B.", "(B)", "B) text", "B: text".
int LeadingLetter(absl::string_view text, size_t num_choices) {
  text = absl::StripAsciiWhitespace(text);
  for (absl::string_view prefix : {"answer:", "the answer is", "answer is", "option"}) {
    if (absl::StartsWithIgnoreCase(text, prefix)) {
      text = absl::StripAsciiWhitespace(text.substr(prefix.size()));
      break;
    }
  }
  if (absl::ConsumePrefix(&text, "(")) {
    if (text.size() >= 2 && text[1] == ')') return LetterIndex(text.substr(0, 1), num_choices);
    return -1;
  }
  if (text.empty() || text[0] < 'A' || text[0] > 'Z') return -1;
  // "A cat" starts with an article, not an option: a letter followed by more
  // text needs punctuation after it.
  if (text.size() > 1 && absl::string_view(".):,").find(text[1]) == absl::string_view::npos) {
    return -1;
  }
  return LetterIndex(text.substr(0, 1), num_choices);
}

bool ContainsWords(absl::string_view haystack, absl::string_view needle) {
  if (needle.empty()) return false;
  const std::string h = " " + std::string(haystack) + " ";
  const std::string n = " " + std::string(needle) + " ";
  return absl::StrContains(h, n);
}

}  // namespace

std::string NormalizeAnswer(absl::string_view text) {
  std::string cleaned;
  cleaned.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool decimal_point = c == '.' && i > 0 && i + 1 < text.size() &&
                               absl::ascii_isdigit(text[i - 1]) && absl::ascii_isdigit(text[i + 1]);
    if (absl::ascii_ispunct(c) && !decimal_point) {
      cleaned.push_back(' ');
    } else {
      cleaned.push_back(absl::ascii_tolower(c));
    }
  }
  std::vector<absl::string_view> words;
  for (absl::string_view w :
       absl::StrSplit(cleaned, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
    if (w == "a" || w == "an" || w == "the") continue;
    words.push_back(w);
  }
  return absl::StrJoin(words, " ");
}

const char* MatchKindName(MatchKind kind) {
  switch (kind) {
    case MatchKind::kMultipleChoice:
      return "multiple_choice";
    case MatchKind::kYesNo:
      return "yes_no";
    case MatchKind::kExact:
      return "exact";
  }
  return "exact";
}

int ExtractChoiceIndex(absl::string_view prediction, const std::vector<std::string>& choices) {
  if (choices.empty()) return -1;
  if (int letter = LeadingLetter(prediction, choices.size()); letter >= 0) return letter;
  const std::string norm = NormalizeAnswer(prediction);
  if (int letter = LetterIndex(norm, choices.size()); letter >= 0) return letter;
  int contained = -1;
  int num_contained = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string option = NormalizeAnswer(choices[i]);
    if (option.empty()) continue;
    if (option == norm) return static_cast<int>(i);
    if (ContainsWords(norm, option)) {
      contained = static_cast<int>(i);
      ++num_contained;
    }
  }
  return num_contained == 1 ? contained : -1;
}

MatchResult MatchAnswer(absl::string_view prediction, absl::string_view answer,
                        const std::vector<std::string>& choices) {
  MatchResult result;
  const std::string gold = NormalizeAnswer(answer);
  if (!choices.empty()) {
    result.kind = MatchKind::kMultipleChoice;
    int gold_index = LetterIndex(absl::StripAsciiWhitespace(answer), choices.size());
    if (gold_index < 0) gold_index = LetterIndex(gold, choices.size());
    for (size_t i = 0; gold_index < 0 && i < choices.size(); ++i) {
      if (NormalizeAnswer(choices[i]) == gold) gold_index = static_cast<int>(i);
    }
    const int predicted = ExtractChoiceIndex(prediction, choices);
    if (predicted >= 0) result.extracted = std::string(1, static_cast<char>('A' + predicted));
    result.correct = predicted >= 0 && predicted == gold_index;
    return result;
  }
  const std::string norm = NormalizeAnswer(prediction);
  if (gold == "yes" || gold == "no") {
    result.kind = MatchKind::kYesNo;
    const std::string first = norm.substr(0, norm.find(' '));
    if (first == "yes" || first == "no") result.extracted = first;
    result.correct = result.extracted == gold;
    return result;
  }
  result.kind = MatchKind::kExact;
  result.extracted = norm;
  result.correct = !gold.empty() && norm == gold;
  return result;
}

}  // namespace vismoe::client
