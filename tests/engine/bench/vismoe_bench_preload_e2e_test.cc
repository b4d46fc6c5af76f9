// vismoe-bench's per-sequence preload flags on the tiny fixture under a budget
// that forces offloading: the report's preload and transfer fields agree with
// each other and with the bytes moved (with preload off and on), the batch
// sweep preloads each sequence, and bad preload flags exit 2 naming the flag.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/child_process.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

struct BenchRun {
  int rc = -1;
  std::string log;        // stdout + stderr
  nlohmann::json report;  // from --json_out; discarded when absent
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tiny fixture at 12.5 MB: one pinned MoE layer, 30 slabs for the other
// three layers' 48 experts; greedy answers of 8 tokens.
BenchRun RunBench(const std::string& name, const std::vector<std::string>& extra) {
  const std::string out = ::testing::TempDir() + "/" + name + ".json";
  const std::string log = ::testing::TempDir() + "/" + name + ".log";
  std::filesystem::remove(out);
  std::filesystem::remove(log);
  std::vector<std::string> argv = {testing::BinaryDir() + "/engine/vismoe-bench",
                                   "--model=" + testing::TinyModelDir(),
                                   "--budget=12.5M",
                                   "--max_context_tokens=4096",
                                   "--pinned_layers=1",
                                   "--threads=2",
                                   "--eviction=lru",
                                   "--max_new_tokens=8",
                                   "--json_out=" + out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  BenchRun run;
  auto rc = testing::RunToCompletion(argv, log, absl::Seconds(300));
  EXPECT_TRUE(rc.ok()) << rc.status();
  if (rc.ok()) run.rc = *rc;
  run.log = ReadFile(log);
  run.report = nlohmann::json::parse(ReadFile(out), nullptr, false);
  return run;
}

// The transfer fields against the bytes moved and each other.
void ExpectConsistentTransfers(const nlohmann::json& r) {
  const uint64_t prefill = r["prefill_transfers"].get<uint64_t>();
  const uint64_t decode = r["decode_transfers"].get<uint64_t>();
  const uint64_t preload = r["preload_transfers"].get<uint64_t>();
  const uint64_t all = prefill + decode + preload;
  EXPECT_EQ(all * r["expert_bytes"].get<uint64_t>(), r["bytes_h2d"].get<uint64_t>())
      << "every copy is one expert, counted in one phase";
  EXPECT_EQ(preload, r["preload_issued"].get<uint64_t>());
  EXPECT_LE(r["preload_used"].get<uint64_t>(), r["preload_issued"].get<uint64_t>());
  EXPECT_EQ(r["offloaded_layers"].get<int>(), 3);
  const double per = r["requests"].get<double>() * 3;
  EXPECT_NEAR(r["transfers_per_layer"].get<double>(), all / per, 1e-9);
  EXPECT_NEAR(r["decode_transfers_per_layer"].get<double>(), (decode + preload) / per, 1e-9);
  EXPECT_NEAR(r["decode_transfers_per_token"].get<double>(),
              static_cast<double>(decode + preload) / r["completion_tokens"].get<double>(), 1e-9);
  EXPECT_GT(r["decode_offloaded_lookups"].get<uint64_t>(), 0u);
  EXPECT_LE(r["preload_kept_lookups"].get<uint64_t>(), r["prefetch_needed"].get<uint64_t>());
}

TEST(VismoeBenchPreloadE2eTest, ReportsPreloadAndTransfers) {
  const BenchRun off = RunBench("vismoe_bench_preload_off", {});
  ASSERT_EQ(off.rc, 0) << off.log;
  ASSERT_TRUE(off.report.is_object()) << off.log;
  EXPECT_EQ(off.report["preload"].get<std::string>(), "none");
  EXPECT_EQ(off.report["preload_issued"].get<uint64_t>(), 0u);
  EXPECT_EQ(off.report["preload_kept_lookups"].get<uint64_t>(), 0u);
  ExpectConsistentTransfers(off.report);

  const BenchRun on =
      RunBench("vismoe_bench_preload_on",
               {"--preload=prefill-routing", "--preload_share=1.0", "--preload_experts=2",
                "--batch_sizes=1,2", "--batch_prompt_tokens=8", "--batch_decode_steps=4"});
  ASSERT_EQ(on.rc, 0) << on.log;
  const nlohmann::json& r = on.report;
  ASSERT_TRUE(r.is_object()) << on.log;
  EXPECT_EQ(r["preload"].get<std::string>(), "prefill-routing");
  EXPECT_EQ(r["preload_experts"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(r["preload_share"].get<double>(), 1.0);
  EXPECT_GT(r["preload_issued"].get<uint64_t>(), 0u);
  EXPECT_GT(r["preload_kept_lookups"].get<uint64_t>(), 0u);
  ExpectConsistentTransfers(r);
  EXPECT_EQ(r["completion_tokens"], off.report["completion_tokens"]);
  const nlohmann::json& rows = r["batch_sweep"]["rows"];
  ASSERT_EQ(rows.size(), 2u) << r["batch_sweep"].dump();
  for (const nlohmann::json& row : rows) {
    EXPECT_GT(row["preload_bytes"].get<uint64_t>(), 0u) << row.dump();
    EXPECT_LE(row["preload_bytes"].get<uint64_t>(), row["bytes_h2d"].get<uint64_t>());
  }
}

TEST(VismoeBenchPreloadE2eTest, BadPreloadFlagsExitTwoNamingTheFlag) {
  for (const char* flag :
       {"--preload=oracle", "--preload_experts=-1", "--preload_share=0", "--preload_share=1.5"}) {
    const BenchRun bad = RunBench("vismoe_bench_bad_preload", {flag});
    EXPECT_EQ(bad.rc, 2) << bad.log;
    EXPECT_NE(bad.log.find(flag), std::string::npos) << bad.log;
  }
}

}  // namespace
}  // namespace vismoe
