// Scoring a model's answer against a reference for the accuracy runner.
#ifndef VISMOE_CLIENT_ANSWER_MATCH_H_
#define VISMOE_CLIENT_ANSWER_MATCH_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace vismoe::client {

// Lower-cases, turns ASCII punctuation into spaces (except a decimal point
// between digits), drops the articles a/an/the and collapses whitespace
// (VQA-style normalisation). "The Cat." -> "cat".
std::string NormalizeAnswer(absl::string_view text);

// How an item is scored.
enum class MatchKind {
  kMultipleChoice,  // choices given: the chosen option's index must match
  kYesNo,           // reference is yes/no (POPE-style): first word of the answer
  kExact,           // normalised exact match
};

const char* MatchKindName(MatchKind kind);

struct MatchResult {
  MatchKind kind = MatchKind::kExact;
  bool correct = false;
  std::string extracted;  // what was read from the prediction ("B", "yes", ...)
};

// The option `prediction` picks among `choices`, or -1: a leading option
// letter ("B", "(B)", "B.", "Answer: B"), else the option whose normalised text
// equals the normalised prediction, else the only option whose text occurs in
// it.
int ExtractChoiceIndex(absl::string_view prediction, const std::vector<std::string>& choices);

// Scores `prediction` against `answer` (a letter or option text when `choices`
// is non-empty).
MatchResult MatchAnswer(absl::string_view prediction, absl::string_view answer,
                        const std::vector<std::string>& choices);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_ANSWER_MATCH_H_
