#include "client/answer_match.h"
#include "gtest/gtest.h"

namespace vismoe::client {
namespace {

TEST(NormalizeAnswerTest, VqaStyle) {
  EXPECT_EQ(NormalizeAnswer("The Cat."), "cat");
  EXPECT_EQ(NormalizeAnswer("  a   red, round   ball!  "), "red round ball");
  EXPECT_EQ(NormalizeAnswer("3.5 meters"), "3.5 meters");
  EXPECT_EQ(NormalizeAnswer("Yes."), "yes");
  EXPECT_EQ(NormalizeAnswer(""), "");
}

TEST(ExtractChoiceTest, LettersAndTexts) {
  const std::vector<std::string> choices = {"red", "blue", "green"};
  EXPECT_EQ(ExtractChoiceIndex("B", choices), 1);
  EXPECT_EQ(ExtractChoiceIndex("B.", choices), 1);
  EXPECT_EQ(ExtractChoiceIndex("(C) green", choices), 2);
  EXPECT_EQ(ExtractChoiceIndex("A) red", choices), 0);
  EXPECT_EQ(ExtractChoiceIndex("Answer: C", choices), 2);
  EXPECT_EQ(ExtractChoiceIndex("The answer is B", choices), 1);
  EXPECT_EQ(ExtractChoiceIndex("b", choices), 1);
  EXPECT_EQ(ExtractChoiceIndex("Blue.", choices), 1);
  EXPECT_EQ(ExtractChoiceIndex("It is green in colour", choices), 2);
  EXPECT_EQ(ExtractChoiceIndex("red or blue", choices), -1);  // ambiguous
  EXPECT_EQ(ExtractChoiceIndex("D", choices), -1);            // out of range
  EXPECT_EQ(ExtractChoiceIndex("A cat", choices), -1);        // article, not a letter
  EXPECT_EQ(ExtractChoiceIndex("", choices), -1);
}

TEST(MatchAnswerTest, MultipleChoice) {
  const std::vector<std::string> choices = {"red", "blue"};
  MatchResult r = MatchAnswer("B", "B", choices);
  EXPECT_EQ(r.kind, MatchKind::kMultipleChoice);
  EXPECT_TRUE(r.correct);
  EXPECT_EQ(r.extracted, "B");
  EXPECT_TRUE(MatchAnswer("blue", "B", choices).correct);
  EXPECT_TRUE(MatchAnswer("B", "blue", choices).correct);  // answer given as text
  EXPECT_FALSE(MatchAnswer("A", "B", choices).correct);
  EXPECT_FALSE(MatchAnswer("no idea", "B", choices).correct);
}

TEST(MatchAnswerTest, YesNo) {
  MatchResult r = MatchAnswer("Yes, there is a dog.", "yes", {});
  EXPECT_EQ(r.kind, MatchKind::kYesNo);
  EXPECT_TRUE(r.correct);
  EXPECT_EQ(r.extracted, "yes");
  EXPECT_FALSE(MatchAnswer("No.", "yes", {}).correct);
  EXPECT_TRUE(MatchAnswer("no", "No", {}).correct);
  EXPECT_FALSE(MatchAnswer("There is a dog", "yes", {}).correct);
}

TEST(MatchAnswerTest, Exact) {
  MatchResult r = MatchAnswer("Two dogs.", "two dogs", {});
  EXPECT_EQ(r.kind, MatchKind::kExact);
  EXPECT_TRUE(r.correct);
  EXPECT_FALSE(MatchAnswer("two dogs and a cat", "two dogs", {}).correct);
  EXPECT_FALSE(MatchAnswer("", "", {}).correct);
}

}  // namespace
}  // namespace vismoe::client
