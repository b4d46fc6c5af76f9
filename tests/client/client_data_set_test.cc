// JSONL parsing, request sets and VQA sets: errors carry file and line.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "client/eval_set.h"
#include "client/jsonl.h"
#include "client/png_writer.h"
#include "client/request_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe::client {
namespace {

using ::testing::HasSubstr;

// A scratch directory removed at the end of each test.
class DataSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vismoe_client_data_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    const uint8_t rgb[12] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9};
    Write("red.png", EncodePngRgb(2, 2, rgb));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }

  std::filesystem::path dir_;
};

TEST(JsonlTest, ParsesObjectsAndSkipsBlankLines) {
  absl::StatusOr<std::vector<JsonlRecord>> r = ParseJsonl("{\"a\":1}\n\n  \n{\"a\":2}\n", "x");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].line, 1);
  EXPECT_EQ((*r)[1].line, 4);
  EXPECT_EQ((*r)[1].value["a"], 2);
}

TEST(JsonlTest, InvalidJsonNamesTheLine) {
  absl::StatusOr<std::vector<JsonlRecord>> r = ParseJsonl("{\"a\":1}\n{\"a\":\n", "set.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("set.jsonl:2: invalid JSON"));
}

TEST(JsonlTest, NonObjectNamesTheLine) {
  absl::StatusOr<std::vector<JsonlRecord>> r = ParseJsonl("\n\n[1, 2]\n", "set.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("set.jsonl:3: expected a JSON object, got array"));
}

TEST(JsonlTest, EmptyFileIsAnError) {
  EXPECT_FALSE(ParseJsonl("\n \n", "e.jsonl").ok());
  EXPECT_EQ(ReadJsonlFile("/nonexistent/x.jsonl").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DataSetTest, RequestSetResolvesImagesRelativeToTheFile) {
  const std::string path =
      Write("reqs.jsonl",
            "{\"prompt\": \"describe\", \"images\": [\"red.png\"], \"max_new_tokens\": 8}\n"
            "{\"prompt\": \"hi\", \"system\": \"be brief\"}\n");
  absl::StatusOr<std::vector<PromptSpec>> set = LoadRequestSet(path);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->size(), 2u);
  EXPECT_EQ((*set)[0].prompt, "describe");
  ASSERT_EQ((*set)[0].images.size(), 1u);
  EXPECT_EQ((*set)[0].images[0].media_type, "image/png");
  EXPECT_EQ((*set)[0].max_new_tokens, 8);
  EXPECT_EQ((*set)[1].system, "be brief");
  EXPECT_EQ((*set)[1].max_new_tokens, 0);
}

TEST_F(DataSetTest, RequestSetErrorsNameLineAndField) {
  struct Case {
    std::string line2;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{\"images\": []}", ":2: \"prompt\" is required"},
      {"{\"prompt\": 3}", ":2: \"prompt\" is required and must be a string"},
      {"{\"prompt\": \"x\", \"max_new_tokens\": -1}", ":2: \"max_new_tokens\" must be"},
      {"{\"prompt\": \"x\", \"images\": \"red.png\"}", ":2: \"images\" must be an array"},
      {"{\"prompt\": \"x\", \"images\": [\"missing.png\"]}", ":2: cannot open image file"},
      {"{\"prompt\": \"\"}", ":2: a request needs a non-empty"},
  };
  for (const Case& c : cases) {
    const std::string path = Write("bad.jsonl", "{\"prompt\": \"ok\"}\n" + c.line2 + "\n");
    absl::StatusOr<std::vector<PromptSpec>> set = LoadRequestSet(path);
    ASSERT_FALSE(set.ok()) << c.line2;
    EXPECT_THAT(set.status().message(), HasSubstr(path + c.want)) << c.line2;
  }
}

TEST_F(DataSetTest, NonImageFileIsRejected) {
  Write("notes.png", "just text");
  const std::string path = Write("r.jsonl", "{\"prompt\": \"x\", \"images\": [\"notes.png\"]}\n");
  absl::StatusOr<std::vector<PromptSpec>> set = LoadRequestSet(path);
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(), HasSubstr("r.jsonl:1:"));
  EXPECT_THAT(set.status().message(), HasSubstr("not a JPEG, PNG or WebP"));
}

TEST_F(DataSetTest, EvalSetParsesAllFields) {
  const std::string path =
      Write("vqa.jsonl",
            "{\"image\": \"red.png\", \"question\": \"Colour?\", \"choices\": [\"red\", \"blue\"], "
            "\"answer\": \"A\", \"category\": \"color\"}\n"
            "{\"question\": \"2+2?\", \"answer\": 4}\n");
  absl::StatusOr<std::vector<EvalItem>> items = LoadEvalSet(path);
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].choices.size(), 2u);
  EXPECT_FALSE((*items)[0].image.bytes.empty());
  EXPECT_EQ((*items)[0].category, "color");
  EXPECT_EQ((*items)[1].answer, "4");
  EXPECT_EQ((*items)[1].category, "default");
  EXPECT_TRUE((*items)[1].image.bytes.empty());
  EXPECT_EQ((*items)[1].line, 2);

  const std::string prompt = BuildEvalPrompt((*items)[0]);
  EXPECT_THAT(prompt, HasSubstr("Colour?\nA. red\nB. blue\n"));
  EXPECT_THAT(prompt, HasSubstr("letter"));
  EXPECT_THAT(BuildEvalPrompt((*items)[1]), HasSubstr("single word or phrase"));
}

TEST_F(DataSetTest, EvalSetErrorsNameLine) {
  const std::string path =
      Write("vqa.jsonl", "{\"question\": \"q\", \"answer\": \"a\"}\n{\"question\": \"q\"}\n");
  absl::StatusOr<std::vector<EvalItem>> items = LoadEvalSet(path);
  ASSERT_FALSE(items.ok());
  EXPECT_THAT(items.status().message(), HasSubstr("vqa.jsonl:2: \"answer\" is required"));

  const std::string bad_choices =
      Write("c.jsonl", "{\"question\": \"q\", \"answer\": \"a\", \"choices\": \"a,b\"}\n");
  EXPECT_THAT(LoadEvalSet(bad_choices).status().message(), HasSubstr("c.jsonl:1: \"choices\""));
}

TEST(ResolvePathTest, RelativeToTheDataFile) {
  EXPECT_EQ(ResolvePath("img/a.png", "/data/set/x.jsonl"), "/data/set/img/a.png");
  EXPECT_EQ(ResolvePath("/abs/a.png", "/data/x.jsonl"), "/abs/a.png");
  EXPECT_EQ(ResolvePath("a.png", "x.jsonl"), "a.png");
}

}  // namespace
}  // namespace vismoe::client
