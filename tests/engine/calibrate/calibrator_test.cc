// Calibrator on the tiny fixture: the profile it produces loads back and fits
// the model, the chosen L_pinned lies in Eq. 10's valid interval, and on the
// held-out requests the trained mlp-lookahead beats history and random choice
// at the same B (issue #6's acceptance criterion). Also the LRU cost model on
// a hand-worked trace, byte-size parsing, the recorder's new hooks, and the
// option errors.
#include "engine/calibrate/calibrator.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "engine/calibrate/routing_trace.h"
#include "engine/model/model_config.h"
#include "engine/policy/calibration_profile.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/image_file.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

CalibrationRequest MakeRequest(const std::string& prompt, const std::vector<std::string>& images,
                               int max_new_tokens) {
  CalibrationRequest r;
  r.name = prompt.substr(0, 20);
  ChatMessage m;
  m.role = "user";
  for (const std::string& name : images) {
    auto img = testing::LoadImageFile(name);
    EXPECT_TRUE(img.ok()) << img.status();
    if (!img.ok()) continue;
    ContentPart part;
    part.kind = ContentPart::Kind::kImage;
    part.image_index = static_cast<int>(r.request.images.size());
    m.content.push_back(part);
    r.request.images.push_back(*std::move(img));
  }
  ContentPart text;
  text.text = prompt;
  m.content.push_back(text);
  r.request.messages.push_back(m);
  r.request.sampling.max_new_tokens = max_new_tokens;
  return r;
}

// The committed calibration set (tests/fixtures/calibration/requests.jsonl:
// 10 image and 8 text requests of 24 new tokens), images relative to it.
std::vector<CalibrationRequest> FixtureRequests() {
  const std::string dir = testing::FixturesDir() + "/calibration";
  std::ifstream in(dir + "/requests.jsonl");
  EXPECT_TRUE(in.good());
  std::vector<CalibrationRequest> out;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << line;
    if (!j.is_object()) continue;
    std::vector<std::string> images;
    for (const auto& i : j.value("images", nlohmann::json::array())) {
      images.push_back(dir + "/" + i.get<std::string>());
    }
    out.push_back(MakeRequest(j["prompt"].get<std::string>(), images, j["max_new_tokens"]));
  }
  return out;
}

CalibratorOptions TinyOptions() {
  CalibratorOptions o;
  o.model_path = testing::TinyModelDir();
  o.budget_bytes = 12 * 1024 * 1024 + 512 * 1024;  // 12.5M: forces offloading
  o.max_context_tokens = 4096;
  o.prefetch_count = 4;  // = top-k of the 16-expert model; random = 0.25
  o.num_threads = 2;
  o.copy_bandwidth = 200e6;
  o.seed = 1;
  return o;
}

TEST(CalibratorTest, ProfileLoadsBackAndMlpBeatsBaselines) {
  std::ostringstream progress;
  CalibratorOptions o = TinyOptions();
  o.progress = &progress;
  const std::vector<CalibrationRequest> requests = FixtureRequests();
  ASSERT_EQ(requests.size(), 18u);
  auto report = RunCalibration(o, requests);
  ASSERT_TRUE(report.ok()) << report.status();
  std::printf("%s\n", report->ToJson().c_str());

  const CalibrationProfile& p = report->profile;
  EXPECT_EQ(report->train_requests, 13);
  EXPECT_EQ(report->held_out_requests, 5);  // round(0.25 * 18)
  EXPECT_GT(report->train_samples, 500);
  ASSERT_TRUE(p.mlp.has_value());
  EXPECT_EQ(p.default_vectors.size(), 4u * 128u);
  EXPECT_THAT(progress.str(), HasSubstr("trace 18/18"));
  EXPECT_THAT(progress.str(), HasSubstr("training mlp-lookahead"));

  // Eq. 10: one cost per L in [0, max_valid]; the choice is in the valid interval.
  ASSERT_GE(report->max_valid_pinned, 1);
  EXPECT_EQ(p.pinned.cost.size(), static_cast<size_t>(report->max_valid_pinned + 1));
  EXPECT_GE(p.chosen_pinned_layers, p.pinned.l_semantic);
  EXPECT_LE(p.chosen_pinned_layers, report->max_valid_pinned);
  // The budget forces offloading, so L = 0 misses; cost = misses * slab / bandwidth.
  EXPECT_GT(report->misses[0], 0);
  EXPECT_DOUBLE_EQ(p.pinned.cost[0], report->misses[0] * report->expert_bytes / 200e6);

  // Hot Recall@4 on the held-out requests.
  ASSERT_TRUE(report->recall.count("mlp-lookahead"));
  ASSERT_TRUE(report->recall.count("history"));
  ASSERT_TRUE(report->recall.count("router-lookahead"));
  const double mlp = report->recall.at("mlp-lookahead").Overall();
  const double history = report->recall.at("history").Overall();
  EXPECT_DOUBLE_EQ(report->random_recall, 0.25);
  EXPECT_GT(report->recall.at("mlp-lookahead").needed[1], 0);
  EXPECT_GT(mlp, history);
  EXPECT_GT(mlp, report->random_recall);
  EXPECT_DOUBLE_EQ(p.hot_recall.at("mlp-lookahead"), mlp);

  // Round trip through Save/Load, and it fits the fixture.
  const std::string path = ::testing::TempDir() + "/calibrator_test_profile.json";
  ASSERT_TRUE(p.Save(path).ok());
  auto back = CalibrationProfile::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  auto config = ModelConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(back->CheckMatches(*config).ok());
  EXPECT_EQ(back->chosen_pinned_layers, p.chosen_pinned_layers);
  EXPECT_EQ(back->prefetch_count, 4);
  std::filesystem::remove(path);
  std::filesystem::remove(::testing::TempDir() + "/calibrator_test_profile.safetensors");
}

TEST(CalibratorTest, ExpertSkippingIsCalibratedSavedAndServed) {
  std::vector<CalibrationRequest> requests = FixtureRequests();
  requests.resize(6);  // enough for the search; keeps the test short
  CalibratorOptions o = TinyOptions();
  o.skip_target_rate = 0.3;
  o.skip_grid = 6;
  auto report = RunCalibration(o, requests);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->skipping.has_value());
  ASSERT_TRUE(report->profile.expert_skipping.has_value());
  const SkipCalibration& s = *report->profile.expert_skipping;
  ASSERT_EQ(s.alpha.size(), 4u);
  for (float a : s.alpha) EXPECT_GT(a, 0.0f);  // every layer of the fixture is MoE
  EXPECT_GE(s.skip_rate, 0.3);
  EXPECT_DOUBLE_EQ(s.target_skip_rate, 0.3);
  EXPECT_GT(s.kl, 0.0);
  EXPECT_THAT(report->ToJson(), HasSubstr("\"frontier\""));

  const std::string path = ::testing::TempDir() + "/calibrator_skip_profile.json";
  ASSERT_TRUE(report->profile.Save(path).ok());
  auto back = CalibrationProfile::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->expert_skipping.has_value());
  EXPECT_EQ(back->expert_skipping->alpha, s.alpha);
  EXPECT_EQ(back->expert_skipping->tau_text, s.tau_text);
  EXPECT_EQ(back->expert_skipping->tau_visual, s.tau_visual);

  // The engine takes alpha(l) and both thresholds from the profile.
  EngineOptions eo;
  eo.model_path = testing::TinyModelDir();
  eo.backend = "cpu";
  eo.num_threads = 2;
  eo.max_context_tokens = 4096;
  eo.calibration_profile = path;
  eo.skipping.kind = "dual-threshold";
  auto engine = Engine::Create(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  GenerateRequest req = requests[0].request;
  req.sampling.max_new_tokens = 1;
  req.policy.token_compressor = "none";
  auto r = (*engine)->Generate(req, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->expert_skipping.total_skipped(), 0u);
  std::filesystem::remove(path);
  std::filesystem::remove(::testing::TempDir() + "/calibrator_skip_profile.safetensors");
}

// The commit threshold: the target-rate quantile of decode certainty, saved
// in the profile, loaded back, and served (a profile-only threshold).
TEST(CalibratorTest, CommitThresholdIsCalibratedSavedAndServed) {
  std::vector<CalibrationRequest> requests = FixtureRequests();
  requests.resize(6);
  CalibratorOptions o = TinyOptions();
  o.commit_target_rate = 0.5;
  auto report = RunCalibration(o, requests);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->commit.has_value());
  ASSERT_TRUE(report->profile.commit_miss.has_value());
  const CommitCalibration& c = *report->profile.commit_miss;
  EXPECT_GT(c.threshold, 0.0f);
  EXPECT_LT(c.threshold, std::log(16.0f));
  EXPECT_NEAR(c.uncertain_rate, 0.5, 0.05);
  // Every decode step's token at each of the 3 MoE layers after l_semantic = 1.
  ASSERT_EQ(report->commit->layers.size(), 3u);
  EXPECT_EQ(report->commit->layers[0].layer, 1);
  EXPECT_GT(c.tokens, 6 * 3);
  EXPECT_EQ(c.tokens, 3 * report->commit->layers[2].tokens);
  // Paper 003's Figure 2 per predictor: every held-out decode token in one bucket.
  ASSERT_TRUE(report->certainty.count("router-lookahead"));
  const CertaintyTally& t = report->certainty.at("router-lookahead");
  ASSERT_EQ(t.tokens.size(), 5u);  // 0..4 correct of top-4
  EXPECT_GT(std::accumulate(t.tokens.begin(), t.tokens.end(), int64_t{0}), 0);
  EXPECT_THAT(report->ToJson(), HasSubstr("\"certainty_by_correct\""));

  const std::string path = ::testing::TempDir() + "/calibrator_commit_profile.json";
  ASSERT_TRUE(report->profile.Save(path).ok());
  auto back = CalibrationProfile::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->commit_miss.has_value());
  EXPECT_EQ(back->commit_miss->threshold, c.threshold);
  EXPECT_EQ(back->commit_miss->tokens, c.tokens);

  // An engine given only the profile commits with its threshold.
  EngineOptions eo;
  eo.model_path = testing::TinyModelDir();
  eo.backend = "cpu";
  eo.num_threads = 2;
  eo.max_context_tokens = 4096;
  eo.gpu_memory_budget_bytes = o.budget_bytes;
  eo.offload.pinned_layers = 1;
  eo.offload.prefetch = "history";
  eo.calibration_profile = path;
  eo.offload.miss_policy = "commit";
  auto engine = Engine::Create(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  GenerateRequest req = requests[0].request;
  req.sampling.max_new_tokens = 8;
  auto r = (*engine)->Generate(req, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->commit.tokens, 0u);
  EXPECT_GT(r->commit.uncertain_tokens, 0u);
  EXPECT_LT(r->commit.uncertain_tokens, r->commit.tokens);
  std::filesystem::remove(path);
  std::filesystem::remove(::testing::TempDir() + "/calibrator_commit_profile.safetensors");
}

TEST(CalibratorTest, RejectsBadOptions) {
  const std::vector<CalibrationRequest> two = {MakeRequest("a", {}, 2), MakeRequest("b", {}, 2)};
  CalibratorOptions o = TinyOptions();
  o.budget_bytes = 1024 * 1024;  // less than the resident weights
  auto r = RunCalibration(o, two);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("--budget"));
  EXPECT_THAT(r.status().message(), HasSubstr("too small"));

  o = TinyOptions();
  r = RunCalibration(o, {two[0]});
  EXPECT_THAT(r.status().message(), HasSubstr("at least 2 requests"));
  o.held_out = 1.0;
  EXPECT_THAT(RunCalibration(o, two).status().message(), HasSubstr("--held_out"));
  o = TinyOptions();
  o.skip_target_rate = 1.5;
  EXPECT_THAT(RunCalibration(o, two).status().message(), HasSubstr("--skip_target_rate"));
  o = TinyOptions();
  o.commit_target_rate = 1.0;
  EXPECT_THAT(RunCalibration(o, two).status().message(), HasSubstr("--commit_target_rate"));
  o = TinyOptions();
  o.gamma = 0;
  EXPECT_THAT(RunCalibration(o, two).status().message(), HasSubstr("--gamma"));
  o = TinyOptions();
  o.model_path = testing::FixturesDir() + "/no-such-model";
  EXPECT_FALSE(RunCalibration(o, two).ok());
}

StepRecord Step(std::vector<std::pair<int, std::vector<int>>> layers) {
  StepRecord s;
  for (auto& [layer, experts] : layers) {
    LayerRecord l;
    l.layer = layer;
    l.experts = experts;
    s.layers.push_back(l);
  }
  return s;
}

TEST(CalibratorTest, LruMissesHandWorked) {
  // Layer 0 pinned; layer 1 offloaded, 2 slabs.
  // step 1: {1,2} -> 2 misses; step 2: {2,3} -> 3 misses (evicts 1);
  // step 3: {1} -> miss (evicts 2); layer 0 never counts.
  const std::vector<std::vector<StepRecord>> traces = {
      {Step({{0, {0, 1}}, {1, {1, 2}}}), Step({{0, {5}}, {1, {2, 3}}})},
      {Step({{0, {7}}, {1, {1}}})}};
  EXPECT_EQ(SimulateLruMisses(traces, {1}, 2), 4);
  EXPECT_EQ(SimulateLruMisses(traces, {1}, 8), 3);  // only cold misses
  EXPECT_EQ(SimulateLruMisses(traces, {0, 1}, 0), 9);
  EXPECT_EQ(SimulateLruMisses(traces, {}, 0), 0);
}

TEST(RoutingTraceRecorderTest, AveragesMoeOutputAndKeepsLastSummary) {
  RoutingTraceRecorder rec(2);
  const float a[] = {1, 2, 3, 4};  // two rows
  const float b[] = {5, 6};
  rec.OnMoeOutput(Phase::kPrefill, 1, a, 2);
  rec.OnMoeOutput(Phase::kDecode, 1, b, 1);
  ASSERT_EQ(rec.moe_output_sum().size(), 2u);
  EXPECT_TRUE(rec.moe_output_sum()[0].empty());
  EXPECT_EQ(rec.moe_output_rows()[0], 0);
  EXPECT_EQ(rec.moe_output_sum()[1], (std::vector<double>{9, 12}));
  EXPECT_EQ(rec.moe_output_rows()[1], 3);
  const std::vector<float> s1 = {1, 1}, s2 = {0.5f, 2};
  rec.OnVisualSummary(s1);
  rec.OnVisualSummary(s2);
  EXPECT_EQ(rec.visual_summary(), s2);
  rec.Clear();
  EXPECT_TRUE(rec.visual_summary().empty());
  EXPECT_TRUE(rec.moe_output_sum().empty());
}

}  // namespace
}  // namespace vismoe
