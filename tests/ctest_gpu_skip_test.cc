// CTest must report a gpu test that ran nothing as Skipped, not Passed, so no
// summary counts a test that did not run (tests/CMakeLists.txt sets a
// SKIP_REGULAR_EXPRESSION on gtest's "[  PASSED  ] 0 tests." for the gpu
// label). Copies the generated CTest definition of moe_permute_gpu_test, every
// test of which needs a device, into a scratch directory and runs CTest there
// (running it on the build tree would overwrite the outer run's
// Testing/Temporary logs).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/paths.h"

namespace vismoe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The CTestTestfile.cmake lines that define `test`, from the build tree.
std::string TestDefinition(const std::string& test) {
  std::ifstream in(BinaryDir() + "/tests/CTestTestfile.cmake");
  std::string line, out;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "add_test([=[" + test + "]=]") ||
        absl::StartsWith(line, "set_tests_properties([=[" + test + "]=]")) {
      out += line + "\n";
    }
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CtestGpuSkipTest, GpuTestsWithoutADeviceAreReportedSkipped) {
  if (CudaDeviceUsable()) GTEST_SKIP() << "a CUDA device is present: the gpu tests really run";
  const std::optional<std::string> ctest = FindOnPath("ctest");
  if (!ctest.has_value()) GTEST_SKIP() << "ctest is not on PATH";
  const std::string definition = TestDefinition("moe_permute_gpu_test");
  ASSERT_THAT(definition, HasSubstr("add_test(")) << "moe_permute_gpu_test is not defined";
  const std::string dir = ::testing::TempDir() + "/ctest_gpu_skip";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/CTestTestfile.cmake") << definition;
  const std::string log = dir + "/ctest.log";
  absl::StatusOr<int> code = RunToCompletion({*ctest, "--test-dir", dir}, log, absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status();
  const std::string out = ReadAll(log);
  EXPECT_EQ(*code, 0) << out;
  EXPECT_THAT(out, HasSubstr("moe_permute_gpu_test"));
  EXPECT_THAT(out, HasSubstr("Skipped"));
  EXPECT_THAT(out, Not(HasSubstr("   Passed"))) << out;
}

}  // namespace
}  // namespace vismoe::testing
