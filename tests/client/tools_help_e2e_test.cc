// Every VisMoE tool answers --help: usage and its own flags on stdout, exit 0
// (abseil's default is exit 1 and, for our file layout, "No flags matched";
// the client tools used to call --help an unknown flag and exit 2).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/paths.h"

namespace vismoe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Tool {
  std::string path;  // relative to the build tree
  std::string flag;  // one of the tool's own flags, listed by --help
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolsHelpTest, EveryToolAnswersHelp) {
  const std::vector<Tool> tools = {
      {"client/vismoe-cli", "--server"},   {"client/vismoe-load", "--concurrency"},
      {"client/vismoe-eval", "--data"},    {"server/vismoe-server", "--max_prompt_tokens"},
      {"engine/vismoe-bench", "--budget"}, {"engine/vismoe-calibrate", "--requests"},
  };
  const std::string log = ::testing::TempDir() + "/tools_help.log";
  for (const Tool& tool : tools) {
    for (const char* help : {"--help", "-h"}) {
      std::remove(log.c_str());  // one run's output per check
      absl::StatusOr<int> code =
          RunToCompletion({BinaryDir() + "/" + tool.path, help}, log, absl::Seconds(30));
      ASSERT_TRUE(code.ok()) << tool.path << ": " << code.status();
      const std::string out = ReadAll(log);
      EXPECT_EQ(*code, 0) << tool.path << " " << help << ":\n" << out;
      EXPECT_THAT(out, HasSubstr(tool.flag)) << tool.path << " " << help;
      EXPECT_THAT(out, Not(HasSubstr("unknown flag"))) << tool.path;
      EXPECT_THAT(out, Not(HasSubstr("No flags matched"))) << tool.path;
      EXPECT_THAT(out, Not(HasSubstr("UNKNOWN"))) << tool.path;  // program name is set
    }
  }
}

}  // namespace
}  // namespace vismoe::testing
