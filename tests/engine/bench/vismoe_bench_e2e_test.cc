// Runs the built vismoe-bench on the tiny fixture under a budget that forces
// offloading, and checks its JSON report: every documented field is present
// and the derived ones agree with the counters they come from; image requests
// (JSONL and --image), the Table 4 ablation rows, the micro benchmarks, and
// the exit code 2 with file:line for a bad request set.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/child_process.h"
#include "tests/testing/cuda_device.h"
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

// Runs vismoe-bench on the tiny fixture with a 12.5 MB budget (resident + 8 MiB
// KV cache + one pinned MoE layer + 30 slabs for the other 48 experts, so the
// deeper layers must copy experts in) plus `extra` flags.
BenchRun RunBench(const std::string& name, const std::vector<std::string>& extra,
                  const std::string& binary = "vismoe-bench") {
  const std::string out = ::testing::TempDir() + "/" + name + ".json";
  const std::string log = ::testing::TempDir() + "/" + name + ".log";
  std::filesystem::remove(out);
  std::filesystem::remove(log);
  std::vector<std::string> argv = {testing::BinaryDir() + "/engine/" + binary,
                                   "--model=" + testing::TinyModelDir(),
                                   "--budget=12.5M",
                                   "--max_context_tokens=4096",
                                   "--pinned_layers=1",
                                   "--copy_bandwidth=200M",
                                   "--threads=2",
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

std::string ImagePath(const std::string& file) {
  return testing::FixturesDir() + "/golden/images/" + file;
}

// Writes `lines` as a JSONL file in its own temp folder and returns its path.
std::string WriteJsonl(const std::string& name, const std::vector<std::string>& lines) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "requests.jsonl").string();
  std::ofstream f(path);
  for (const std::string& l : lines) f << l << "\n";
  return path;
}

TEST(VismoeBenchE2eTest, ReportsOffloadFieldsConsistently) {
  const BenchRun run = RunBench("vismoe_bench_report",
                                {"--prefetch=history", "--eviction=guarded", "--max_new_tokens=8"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& r = run.report;
  ASSERT_TRUE(r.is_object()) << run.log;
  for (const char* key : {"ttft_seconds_mean",
                          "tpot_seconds_mean",
                          "request_seconds_mean",
                          "total_seconds",
                          "runs",
                          "visual_tokens_before",
                          "visual_tokens_after",
                          "cache_queries",
                          "cache_hits",
                          "hit_ratio",
                          "prefetch_needed",
                          "prefetch_recalled",
                          "hot_recall",
                          "prefetch_issued",
                          "prefetch_used",
                          "bytes_h2d",
                          "stall_seconds",
                          "missed_experts",
                          "missed_bytes",
                          "expert_bytes",
                          "copy_bandwidth_measured_bytes_per_s",
                          "compute_seconds",
                          "bound_seconds",
                          "per_request"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  const double queries = r["cache_queries"].get<double>();
  const double hits = r["cache_hits"].get<double>();
  ASSERT_GT(queries, 0);
  EXPECT_LT(hits, queries) << "the budget should force misses";
  EXPECT_NEAR(r["hit_ratio"].get<double>(), hits / queries, 1e-12);
  // Every lookup is counted in exactly one phase; 8 new tokens = 7 decode steps.
  const double decode_queries = r["decode_cache_queries"].get<double>();
  EXPECT_GT(decode_queries, 0);
  EXPECT_GT(r["prefill_cache_queries"].get<double>(), 0);
  EXPECT_EQ(r["prefill_cache_queries"].get<double>() + decode_queries, queries);
  EXPECT_EQ(r["prefill_cache_hits"].get<double>() + r["decode_cache_hits"].get<double>(), hits);
  EXPECT_NEAR(r["decode_hit_ratio"].get<double>(),
              r["decode_cache_hits"].get<double>() / decode_queries, 1e-12);
  const double needed = r["prefetch_needed"].get<double>();
  ASSERT_GT(needed, 0);
  EXPECT_NEAR(r["hot_recall"].get<double>(), r["prefetch_recalled"].get<double>() / needed, 1e-12);
  EXPECT_EQ(r["missed_bytes"].get<double>(),
            r["missed_experts"].get<double>() * r["expert_bytes"].get<double>());
  EXPECT_GE(r["bytes_h2d"].get<double>(), r["missed_bytes"].get<double>());
  const double bw = r["copy_bandwidth_measured_bytes_per_s"].get<double>();
  ASSERT_GT(bw, 0);
  const double bound =
      std::max(r["compute_seconds"].get<double>(), r["missed_bytes"].get<double>() / bw);
  EXPECT_NEAR(r["bound_seconds"].get<double>(), bound, 1e-9 * std::max(1.0, bound));
  ASSERT_TRUE(r["per_request"].is_array());
  ASSERT_EQ(r["per_request"].size(), 1u);
  EXPECT_EQ(r["per_request"][0]["completion_tokens"].get<int>(), 8);
  EXPECT_GT(r["ttft_seconds_mean"].get<double>(), 0);
  EXPECT_EQ(r["visual_tokens_before"].get<int>(), 0) << "text-only request";
}

TEST(VismoeBenchE2eTest, SpeculativeExecutionReportsItsCountsAndTimes) {
  // Copies at 20 MB/s: decode steps wait on them, and the waits compute ahead.
  const BenchRun run =
      RunBench("vismoe_bench_speculative",
               {"--prefetch=router-lookahead", "--eviction=guarded", "--copy_bandwidth=20M",
                "--max_new_tokens=16", "--speculative_execution"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& r = run.report;
  ASSERT_TRUE(r.is_object()) << run.log;
  for (const char* key :
       {"speculative_executed", "speculative_kept", "speculative_discarded",
        "speculative_compute_seconds", "speculative_kept_seconds", "speculative_saved_seconds",
        "speculative_bound_seconds", "speculative_wait_seconds", "speculative_overrun_seconds"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  const double executed = r["speculative_executed"].get<double>();
  EXPECT_GT(executed, 0);
  EXPECT_EQ(r["speculative_kept"].get<double>() + r["speculative_discarded"].get<double>(),
            executed);
  EXPECT_EQ(r["per_request"][0]["speculative_kept"].get<double>(),
            r["speculative_kept"].get<double>());
  EXPECT_GT(r["speculative_wait_seconds"].get<double>(), 0);
  EXPECT_LE(r["speculative_saved_seconds"].get<double>(),
            r["speculative_bound_seconds"].get<double>() * (1 + 1e-9));
  EXPECT_LE(r["speculative_kept_seconds"].get<double>(),
            r["speculative_compute_seconds"].get<double>());
  EXPECT_NE(run.log.find("speculative execution on"), std::string::npos) << run.log;
}

TEST(VismoeBenchE2eTest, ImageRequestsReportVisualTokens) {
  // The JSONL names its image relative to its own folder.
  const std::string jsonl =
      WriteJsonl("bench_images", {R"({"prompt": "What is shown?", "images": ["a.png"]})",
                                  R"({"prompt": "Say hi.", "max_new_tokens": 2})"});
  std::filesystem::copy_file(ImagePath("tiny_20x13.png"),
                             std::filesystem::path(jsonl).parent_path() / "a.png",
                             std::filesystem::copy_options::overwrite_existing);
  const BenchRun run =
      RunBench("vismoe_bench_images", {"--requests=" + jsonl, "--max_new_tokens=4", "--repeat=2",
                                       "--token_compressor=affinity", "--keep_ratio=0.5"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& r = run.report;
  ASSERT_TRUE(r.is_object()) << run.log;
  EXPECT_EQ(r["runs"].get<int>(), 2);
  EXPECT_EQ(r["requests"].get<int>(), 2);
  ASSERT_EQ(r["per_request"].size(), 4u);
  for (const nlohmann::json& p : r["per_request"]) {
    const int before = p["visual_tokens_before"].get<int>();
    if (p["index"].get<int>() == 0) {
      EXPECT_EQ(p["images"].get<int>(), 1);
      ASSERT_GT(before, 1);
      EXPECT_EQ(p["visual_tokens_after"].get<int>(), std::max(1, before / 2)) << "beta 0.5";
      EXPECT_EQ(p["completion_tokens"].get<int>(), 4);
    } else {
      EXPECT_EQ(before, 0);
      EXPECT_EQ(p["completion_tokens"].get<int>(), 2);
    }
  }
  const int before = r["per_request"][0]["visual_tokens_before"].get<int>();
  // Means per run of the set: one image request per run.
  EXPECT_DOUBLE_EQ(r["visual_tokens_before"].get<double>(), before);

  // Single-prompt mode with --image sees the same image the same way.
  const BenchRun single = RunBench(
      "vismoe_bench_image_flag", {"--image=" + ImagePath("tiny_20x13.png"), "--max_new_tokens=2"});
  ASSERT_EQ(single.rc, 0) << single.log;
  EXPECT_EQ(single.report["visual_tokens_before"].get<int>(), before);
  EXPECT_EQ(single.report["visual_tokens_after"].get<int>(), before) << "no compression";
}

TEST(VismoeBenchE2eTest, AblationPrintsTheFourTable4Rows) {
  const std::string jsonl = WriteJsonl(
      "bench_ablation",
      {R"({"prompt": "Describe it.", "images": [")" + ImagePath("odd_301x217.png") + R"("]})"});
  const BenchRun run = RunBench("vismoe_bench_ablation",
                                {"--requests=" + jsonl, "--max_new_tokens=4", "--ablation"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& a = run.report["ablation"];
  ASSERT_TRUE(a.is_array()) << run.log;
  ASSERT_EQ(a.size(), 4u);
  const std::vector<std::string> names = {"base", "+compression", "+prediction & prefetching",
                                          "full"};
  const double base = a[0]["request_seconds_mean"].get<double>();
  ASSERT_GT(base, 0);
  for (size_t i = 0; i < names.size(); ++i) {
    const nlohmann::json& row = a[i];
    EXPECT_EQ(row["name"].get<std::string>(), names[i]);
    EXPECT_NE(run.log.find(names[i] + " "), std::string::npos) << "table line " << names[i];
    EXPECT_NEAR(row["normalised_percent"].get<double>(),
                100.0 * row["request_seconds_mean"].get<double>() / base, 1e-9);
    for (const char* key : {"ttft_seconds_mean", "tpot_seconds_mean", "hit_ratio", "hot_recall",
                            "bytes_h2d", "stall_seconds", "visual_tokens_after"}) {
      EXPECT_TRUE(row.contains(key)) << names[i] << " " << key;
    }
    EXPECT_GT(row["bytes_h2d"].get<double>(), 0) << names[i];
  }
  EXPECT_DOUBLE_EQ(a[0]["normalised_percent"].get<double>(), 100.0);
  // What each row turns on.
  EXPECT_EQ(a[0]["token_compressor"], "none");
  EXPECT_EQ(a[0]["prefetch"], "none");
  EXPECT_EQ(a[0]["eviction"], "lru");
  EXPECT_EQ(a[1]["token_compressor"], "affinity");
  EXPECT_EQ(a[1]["prefetch"], "none");
  EXPECT_EQ(a[2]["prefetch"], "router-lookahead") << "default without a calibration profile";
  EXPECT_EQ(a[2]["eviction"], "lru");
  EXPECT_EQ(a[3]["eviction"], "guarded");
  EXPECT_EQ(a[3]["prefetch"], "router-lookahead");
  const double visual = a[0]["visual_tokens_before"].get<double>();
  ASSERT_GT(visual, 1);
  EXPECT_EQ(a[0]["visual_tokens_after"].get<double>(), visual);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(a[i]["visual_tokens_after"].get<double>(), std::floor(visual * 0.5)) << names[i];
  }
  EXPECT_EQ(a[0]["prefetch_issued"].get<double>(), 0);
  EXPECT_GT(a[2]["prefetch_issued"].get<double>(), 0);
}

TEST(VismoeBenchE2eTest, MicroBenchmarksReportEveryEntry) {
  const BenchRun run =
      RunBench("vismoe_bench_micro", {"--max_new_tokens=1", "--micro", "--micro_seconds=0.01"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& m = run.report["micro"];
  ASSERT_TRUE(m.is_array()) << run.log;
  std::set<std::string> names;
  for (const nlohmann::json& e : m) {
    const std::string name = e["name"].get<std::string>();
    names.insert(name);
    EXPECT_GE(e["calls"].get<int64_t>(), 10) << name;
    EXPECT_GT(e["mean_us"].get<double>(), 0) << name;
    EXPECT_GT(e["p50_us"].get<double>(), 0) << name;
    EXPECT_LE(e["p50_us"].get<double>(), e["p99_us"].get<double>()) << name;
  }
  for (const char* kind : {"random", "saliency", "affinity"}) {
    for (const char* n : {"256", "1024", "4096"}) {
      EXPECT_TRUE(names.count(std::string("compress.") + kind + ".n" + n)) << kind << n;
    }
  }
  EXPECT_TRUE(names.count("predict.history.observe_predict"));
  EXPECT_TRUE(names.count("predict.router-lookahead.decode.rows1"));
  EXPECT_TRUE(names.count("predict.router-lookahead.prefill.rows1024"));
  EXPECT_TRUE(names.count("predict.mlp-lookahead.forward"));
  for (const char* kind : {"greedy", "t1", "t0.7.top_p0.9", "t0.7.top_k50"}) {
    const std::string prefix = std::string("sample.") + kind + ".vocab";
    EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return n.rfind(prefix, 0) == 0;
    })) << prefix;
  }
}

// --micro_kernel_dtypes adds the block-scaled weights (F8_E4M3, MXFP4) on the
// [out, in] shapes: every entry timed on every path, its bytes counting the
// scales; an unknown dtype is a flag error.
TEST(VismoeBenchE2eTest, KernelMicroBenchmarksTakeTheBlockScaledDtypes) {
  const BenchRun run =
      RunBench("vismoe_bench_micro_kernels",
               {"--max_new_tokens=1", "--micro_kernels", "--micro_kernel_dtypes=BF16,MXFP4,F8_E4M3",
                "--micro_seconds=0.001"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& k = run.report["micro_kernels"]["kernels"];
  ASSERT_TRUE(k.is_array()) << run.log;
  std::map<std::string, int> per_dtype;
  for (const nlohmann::json& e : k) {
    const std::string dtype = e["dtype"].get<std::string>();
    ++per_dtype[dtype];
    EXPECT_GT(e["reference_us"].get<double>(), 0) << e["name"];
    EXPECT_GT(e["portable_us"].get<double>(), 0) << e["name"];
    if (dtype != "BF16") {
      EXPECT_EQ(e["layout"], "out_in") << e["name"];
    }
  }
  EXPECT_GT(per_dtype["MXFP4"], 0);
  EXPECT_GT(per_dtype["F8_E4M3"], 0);
  EXPECT_GT(per_dtype["BF16"], per_dtype["F8_E4M3"]);  // BF16 also has the [in, out] shapes
  const BenchRun bad = RunBench("vismoe_bench_bad_kernel_dtype", {"--micro_kernel_dtypes=U8"});
  EXPECT_EQ(bad.rc, 2) << bad.log;
  EXPECT_NE(bad.log.find("--micro_kernel_dtypes: 'U8'"), std::string::npos) << bad.log;
}

// The batch sweep at the tiny fixture's offloading budget: one row per batch
// size, every decode token counted, experts copied in.
TEST(VismoeBenchE2eTest, BatchSweepReportsEveryBatchSize) {
  const BenchRun run =
      RunBench("vismoe_bench_batch", {"--max_new_tokens=1", "--batch_sizes=1,3",
                                      "--batch_prompt_tokens=8", "--batch_decode_steps=4"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& s = run.report["batch_sweep"];
  ASSERT_TRUE(s.is_object()) << run.log;
  EXPECT_EQ(s["decode_steps"].get<int>(), 4);
  const nlohmann::json& rows = s["rows"];
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int batch = i == 0 ? 1 : 3;
    EXPECT_EQ(rows[i]["batch"].get<int>(), batch);
    EXPECT_EQ(rows[i]["tokens"].get<int64_t>(), 4 * batch);
    EXPECT_GT(rows[i]["tokens_per_s"].get<double>(), 0);
    EXPECT_GT(rows[i]["bytes_h2d"].get<uint64_t>(), 0u) << "the budget offloads experts";
  }
  const BenchRun bad = RunBench("vismoe_bench_bad_batch", {"--batch_sizes=1,0"});
  EXPECT_EQ(bad.rc, 2) << bad.log;
  EXPECT_NE(bad.log.find("--batch_sizes"), std::string::npos) << bad.log;
}

// The concurrency sweep: one row per stream count, each stream's tokens
// counted once, the one-stream row its own reference.
TEST(VismoeBenchE2eTest, ConcurrencySweepReportsEveryStreamCount) {
  const BenchRun run =
      RunBench("vismoe_bench_streams", {"--max_new_tokens=6", "--concurrency=1,3"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& rows = run.report["concurrency_sweep"];
  ASSERT_TRUE(rows.is_array()) << run.log;
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int streams = i == 0 ? 1 : 3;
    const nlohmann::json& r = rows[i];
    EXPECT_EQ(r["streams"].get<int>(), streams);
    const int64_t tokens = r["completion_tokens"].get<int64_t>();
    EXPECT_GE(tokens, streams);
    EXPECT_LE(tokens, 6 * streams);
    EXPECT_EQ(r["decode_tokens"].get<int64_t>(), tokens - streams);
    EXPECT_GT(r["wall_seconds"].get<double>(), 0);
    EXPECT_LE(r["decode_seconds"].get<double>(), r["wall_seconds"].get<double>());
    EXPECT_NEAR(r["output_tokens_per_s"].get<double>(), tokens / r["wall_seconds"].get<double>(),
                1e-6 * tokens);
    ASSERT_TRUE(r.contains("output_tokens_per_s_vs_one")) << r.dump();
  }
  EXPECT_DOUBLE_EQ(rows[0]["output_tokens_per_s_vs_one"].get<double>(), 1.0);
  // One prompt from every stream: batched greedy decoding gives each the same tokens.
  const BenchRun same =
      RunBench("vismoe_bench_same_streams",
               {"--max_new_tokens=6", "--concurrency=3", "--concurrency_same_prompt"});
  ASSERT_EQ(same.rc, 0) << same.log;
  ASSERT_EQ(same.report["concurrency_sweep"].size(), 1u) << same.log;
  EXPECT_TRUE(same.report["concurrency_sweep"][0]["identical_outputs"].get<bool>()) << same.log;
  const BenchRun bad = RunBench("vismoe_bench_bad_streams", {"--concurrency=2,0"});
  EXPECT_EQ(bad.rc, 2) << bad.log;
  EXPECT_NE(bad.log.find("--concurrency"), std::string::npos) << bad.log;
}

// --routing_stats: the model's own routing, decode and text prefill apart,
// every figure a share in [0, 1] and the cache rows at 10-60%; a sampled,
// seeded request set decodes the same tokens twice.
TEST(VismoeBenchE2eTest, RoutingStatsReportTheModelsOwnRouting) {
  const std::string sampled = WriteJsonl(
      "bench_sampled",
      {R"({"prompt": "Tell a story.", "temperature": 1.0, "seed": 5, "max_new_tokens": 12})"});
  const BenchRun run = RunBench("vismoe_bench_routing_stats",
                                {"--requests=" + sampled, "--repeat=2", "--routing_stats"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& per = run.report["per_request"];
  ASSERT_EQ(per.size(), 2u);
  EXPECT_EQ(per[0]["token_ids"], per[1]["token_ids"]) << "same seed, same tokens";
  const nlohmann::json& rs = run.report["routing_stats"];
  ASSERT_TRUE(rs.is_object()) << run.log;
  EXPECT_DOUBLE_EQ(rs["temperature"].get<double>(), 1.0);
  for (const char* part : {"decode", "prefill_text"}) {
    ASSERT_TRUE(rs.contains(part)) << rs.dump();
    const nlohmann::json& s = rs[part];
    EXPECT_GT(s["sequences"].get<int64_t>(), 0);
    for (const char* share : {"next_token_repeat", "reuse_within_1", "reuse_within_8"}) {
      EXPECT_GE(s[share].get<double>(), 0.0) << part << " " << share;
      EXPECT_LE(s[share].get<double>(), 1.0) << part << " " << share;
    }
    ASSERT_EQ(s["cache"].size(), 6u);
    for (const auto& c : s["cache"]) {
      for (const char* hit : {"lru_hit", "belady_hit", "shared_lru_hit", "shared_belady_hit"}) {
        EXPECT_GE(c[hit].get<double>(), 0.0) << c.dump();
        EXPECT_LE(c[hit].get<double>(), 1.0) << c.dump();
      }
    }
  }
  EXPECT_FALSE(rs.contains("prefill_image"));
  EXPECT_NE(run.log.find("routing statistics"), std::string::npos) << run.log;
}

// --synthetic_weights on the scaled "mid" config, whose directory holds no
// safetensors: the run offloads, and expert_bytes is the config's (3 x 512 x 256 BF16).
TEST(VismoeBenchE2eTest, SyntheticWeightsRunOnAConfigOnlyDirectory) {
  // Later flags override RunBench's --model, --budget and --max_context_tokens.
  const BenchRun run =
      RunBench("vismoe_bench_synthetic",
               {"--model=" + testing::FixturesDir() + "/synthetic/qwen3-vl-mid", "--budget=64M",
                "--max_context_tokens=256", "--synthetic_weights", "--synthetic_seed=3",
                "--max_new_tokens=4", "--micro", "--micro_seconds=0.01"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& r = run.report;
  ASSERT_TRUE(r.is_object()) << run.log;
  EXPECT_TRUE(r["synthetic_weights"].get<bool>());
  EXPECT_EQ(r["expert_bytes"].get<double>(), 3.0 * 512 * 256 * 2);
  EXPECT_LT(r["cache_hits"].get<double>(), r["cache_queries"].get<double>());
  EXPECT_GT(r["missed_bytes"].get<double>(), 0);
  EXPECT_EQ(r["per_request"][0]["completion_tokens"].get<int>(), 4);
  EXPECT_TRUE(r["micro"].is_array());
  EXPECT_NE(run.log.find("synthetic weights:"), std::string::npos) << "the allocation line";
  // checkpoint_bytes: the generated weights' bytes, as the allocation line says.
  const std::string bytes = absl::StrCat(r["checkpoint_bytes"].get<int64_t>(), " bytes");
  EXPECT_GT(r["checkpoint_bytes"].get<int64_t>(), 0);
  EXPECT_NE(run.log.find("tensors, " + bytes), std::string::npos) << bytes << "\n" << run.log;
  // host_experts=auto on the CPU backend: copies read the generated weights.
  EXPECT_EQ(r["host_experts"].get<std::string>(), "auto");
  EXPECT_NE(run.log.find("served from the checkpoint (no second copy; host_experts auto)"),
            std::string::npos)
      << run.log;
}

TEST(VismoeBenchE2eTest, BadRequestSetExitsTwoNamingFileAndLine) {
  const std::string bad_json =
      WriteJsonl("bench_bad_json", {R"({"prompt": "fine"})", R"({"prompt": )"});
  BenchRun run = RunBench("vismoe_bench_bad_json", {"--requests=" + bad_json});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find(bad_json + ":2: "), std::string::npos) << run.log;

  const std::string missing =
      WriteJsonl("bench_missing_image", {R"({"prompt": "look", "images": ["no_such_image.png"]})"});
  run = RunBench("vismoe_bench_missing_image", {"--requests=" + missing});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find(missing + ":1: "), std::string::npos) << run.log;
  EXPECT_NE(run.log.find("no_such_image.png"), std::string::npos) << run.log;

  const std::string bad_images =
      WriteJsonl("bench_bad_images", {R"({"prompt": "look", "images": "a.png"})"});
  run = RunBench("vismoe_bench_bad_images", {"--requests=" + bad_images});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find(bad_images + ":1: "), std::string::npos) << run.log;

  const std::string bad_temperature =
      WriteJsonl("bench_bad_temperature", {R"({"prompt": "hot", "temperature": -1})"});
  run = RunBench("vismoe_bench_bad_temperature", {"--requests=" + bad_temperature});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find(bad_temperature + ":1: \"temperature\""), std::string::npos) << run.log;

  run = RunBench("vismoe_bench_missing_flag_image",
                 {"--image=" + ::testing::TempDir() + "/absent.png"});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find("absent.png"), std::string::npos) << run.log;
}

// vismoe-bench-lite (no OpenCV, the build carried to GPU machines) runs
// generated images: two images give twice the visual tokens of one; it reads
// PNG files (the same answer as vismoe-bench's) and refuses other image files
// with a message that says why.
TEST(VismoeBenchE2eTest, LiteBuildRunsSyntheticImages) {
  const BenchRun one = RunBench(
      "vismoe_bench_lite_1img",
      {"--synthetic_images=1", "--synthetic_image_size=64", "--max_new_tokens=2", "--backend=cpu"},
      "vismoe-bench-lite");
  ASSERT_EQ(one.rc, 0) << one.log;
  EXPECT_EQ(one.report["backend"], "cpu");
  const int tokens = one.report["visual_tokens_before"].get<int>();
  EXPECT_GT(tokens, 0);
  const BenchRun two = RunBench(
      "vismoe_bench_lite_2img",
      {"--synthetic_images=2", "--synthetic_image_size=64", "--max_new_tokens=2", "--backend=cpu"},
      "vismoe-bench-lite");
  ASSERT_EQ(two.rc, 0) << two.log;
  EXPECT_EQ(two.report["per_request"][0]["images"].get<int>(), 2);
  EXPECT_EQ(two.report["visual_tokens_before"].get<int>(), 2 * tokens);
  EXPECT_GT(two.report["copy_bandwidth_measured_bytes_per_s"].get<double>(), 0);

  const std::vector<std::string> png = {"--image=" + ImagePath("rgba_180x120.png"),
                                        "--max_new_tokens=4", "--backend=cpu"};
  const BenchRun lite = RunBench("vismoe_bench_lite_png", png, "vismoe-bench-lite");
  const BenchRun full = RunBench("vismoe_bench_full_png", png);
  ASSERT_EQ(lite.rc, 0) << lite.log;
  ASSERT_EQ(full.rc, 0) << full.log;
  EXPECT_EQ(lite.report["per_request"][0]["token_ids"], full.report["per_request"][0]["token_ids"]);
  EXPECT_EQ(lite.report["per_request"][0]["text"], full.report["per_request"][0]["text"]);
  EXPECT_EQ(lite.report["visual_tokens_before"], full.report["visual_tokens_before"]);

  const BenchRun jpeg =
      RunBench("vismoe_bench_lite_jpeg", {"--image=" + ImagePath("demo.jpg")}, "vismoe-bench-lite");
  EXPECT_NE(jpeg.rc, 0) << jpeg.log;
  EXPECT_NE(jpeg.log.find("PNG only"), std::string::npos) << jpeg.log;
}

// Miss policy cpu and a static host layer: the report says what was asked
// for, how many experts the host computed and the bytes that spared; the
// copy floor counts only the misses that were copied.
TEST(VismoeBenchE2eTest, HostExecutionIsReported) {
  const BenchRun run = RunBench("vismoe_bench_host", {"--miss_policy=cpu", "--host_moe_layers=1",
                                                      "--copy_bandwidth=5M", "--max_new_tokens=6"});
  ASSERT_EQ(run.rc, 0) << run.log;
  const nlohmann::json& r = run.report;
  ASSERT_TRUE(r.is_object()) << run.log;
  EXPECT_EQ(r["miss_policy"], "cpu");
  EXPECT_EQ(r["host_moe_layers"], 1);
  const double host = r["experts_host_computed"].get<double>();
  EXPECT_GT(host, 0);
  EXPECT_GE(r["bytes_not_copied"].get<double>(), host * r["expert_bytes"].get<double>());
  EXPECT_EQ(r["missed_bytes"].get<double>(),
            (r["missed_experts"].get<double>() - host) * r["expert_bytes"].get<double>());
  EXPECT_EQ(r["per_request"][0]["experts_host_computed"].get<double>(), host);
  EXPECT_NE(run.log.find("miss policy cpu, 1 MoE layers on the host"), std::string::npos)
      << run.log;

  BenchRun bad = RunBench("vismoe_bench_bad_miss_policy", {"--miss_policy=sometimes"});
  EXPECT_EQ(bad.rc, 2) << bad.log;
  EXPECT_NE(bad.log.find("--miss_policy=sometimes: expected one of fetch | commit | cpu"),
            std::string::npos)
      << bad.log;
  bad = RunBench("vismoe_bench_bad_host_layers", {"--host_moe_layers=-1"});
  EXPECT_EQ(bad.rc, 2) << bad.log;
  EXPECT_NE(bad.log.find("--host_moe_layers=-1"), std::string::npos) << bad.log;
  // More host layers than the plan offloads: the engine refuses to start.
  bad = RunBench("vismoe_bench_too_many_host_layers", {"--host_moe_layers=99"});
  EXPECT_EQ(bad.rc, 1) << bad.log;
  EXPECT_NE(bad.log.find("host_moe_layers=99"), std::string::npos) << bad.log;
}

TEST(VismoeBenchE2eTest, BadFlagsExitTwoNamingTheFlag) {
  for (const char* flag : {"--backend=tpu", "--synthetic_images=-1", "--synthetic_image_size=8",
                           "--host_experts=pinned"}) {
    const BenchRun bad = RunBench("vismoe_bench_bad_flag", {flag});
    EXPECT_EQ(bad.rc, 2) << bad.log;
    EXPECT_NE(bad.log.find(flag), std::string::npos) << bad.log;
  }
  if (!testing::CudaDeviceUsable()) {
    // Asking for the cuda backend without a device fails at engine start, saying so.
    const BenchRun cuda = RunBench("vismoe_bench_no_cuda", {"--backend=cuda"});
    EXPECT_EQ(cuda.rc, 1) << cuda.log;
    EXPECT_NE(cuda.log.find("backend 'cuda'"), std::string::npos) << cuda.log;
  }
  BenchRun run = RunBench("vismoe_bench_bad_prefetch", {"--prefetch=oracle"});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find("--prefetch=oracle"), std::string::npos) << run.log;
  run = RunBench("vismoe_bench_ablation_no_budget", {"--ablation", "--budget=0"});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find("--ablation needs --budget"), std::string::npos) << run.log;
  run = RunBench("vismoe_bench_bad_keep_ratio", {"--keep_ratio=0"});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_NE(run.log.find("--keep_ratio=0"), std::string::npos) << run.log;
}

}  // namespace
}  // namespace vismoe
