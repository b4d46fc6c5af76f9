// CalibrationProfile: Save/Load round trip (JSON + tensor file), errors that
// name the file and field (missing file, corrupt JSON, bad values, wrong
// tensor shapes), and CheckMatches against the tiny fixture's config.
#include "engine/policy/calibration_profile.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "engine/calibrate/mlp_trainer.h"
#include "engine/core/tensor.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors_writer.h"
#include "engine/policy/lookahead_features.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

class CalibrationProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::BinaryDir()) / "calibration_profile_test";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    json_ = (dir_ / "profile.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A profile that fits the tiny fixture (4 layers, 16 experts, hidden 128, vision).
  static CalibrationProfile TinyProfile(bool with_mlp) {
    CalibrationProfile p;
    p.model_type = "qwen3_vl_moe";
    p.num_layers = 4;
    p.num_experts = 16;
    p.hidden_size = 128;
    p.has_vision = true;
    p.window = 3;
    p.gamma = 0.5f;
    p.prefetch_count = 4;
    p.pinned.l_semantic = 1;
    p.pinned.cost = {3.5, 2.0, 1.25};
    p.budget_bytes = 123456789;
    p.chosen_pinned_layers = 2;
    p.default_vectors.resize(4 * 128);
    for (size_t i = 0; i < p.default_vectors.size(); ++i) p.default_vectors[i] = 0.01f * i;
    p.hot_recall = {{"random", 0.25}, {"mlp-lookahead", 0.6}};
    if (with_mlp) {
      const int width = LookaheadFeatureWidth(16, 128, true);
      std::vector<LookaheadSample> s(6);
      for (int i = 0; i < 6; ++i) {
        s[i].x.assign(width, 0.1f * i);
        s[i].target.assign(16, i % 2 ? 1.0f : 0.0f);
      }
      MlpTrainOptions opt;
      opt.hidden1 = 8;
      opt.hidden2 = 4;
      opt.epochs = 2;
      auto mlp = TrainMlpLookahead(s, opt);
      EXPECT_TRUE(mlp.ok()) << mlp.status();
      if (mlp.ok()) p.mlp = std::move(*mlp);
    }
    return p;
  }

  std::string ReadJson() const {
    std::ifstream in(json_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void WriteJson(const std::string& text) const { std::ofstream(json_) << text; }
  // Replaces the first occurrence of `from` in the saved JSON.
  void EditJson(const std::string& from, const std::string& to) const {
    std::string text = ReadJson();
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    WriteJson(text);
  }

  std::filesystem::path dir_;
  std::string json_;
};

TEST_F(CalibrationProfileTest, RoundTrips) {
  const CalibrationProfile p = TinyProfile(/*with_mlp=*/true);
  ASSERT_TRUE(p.mlp.has_value());
  ASSERT_TRUE(p.Save(json_).ok());
  EXPECT_TRUE(std::filesystem::exists(dir_ / "profile.safetensors"));
  auto back = CalibrationProfile::Load(json_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model_type, p.model_type);
  EXPECT_EQ(back->num_layers, 4);
  EXPECT_EQ(back->num_experts, 16);
  EXPECT_EQ(back->hidden_size, 128);
  EXPECT_TRUE(back->has_vision);
  EXPECT_EQ(back->window, 3);
  EXPECT_FLOAT_EQ(back->gamma, 0.5f);
  EXPECT_EQ(back->prefetch_count, 4);
  EXPECT_EQ(back->pinned.l_semantic, 1);
  EXPECT_EQ(back->pinned.cost, p.pinned.cost);
  EXPECT_EQ(back->budget_bytes, 123456789);
  EXPECT_EQ(back->chosen_pinned_layers, 2);
  EXPECT_EQ(back->default_vectors, p.default_vectors);
  EXPECT_EQ(back->hot_recall, p.hot_recall);
  ASSERT_TRUE(back->mlp.has_value());
  const std::vector<float> x(p.mlp->input_dim(), 0.3f);
  EXPECT_EQ(back->mlp->Predict(x), p.mlp->Predict(x));
  EXPECT_FLOAT_EQ(back->mlp->weights().bn_eps, p.mlp->weights().bn_eps);
}

TEST_F(CalibrationProfileTest, RoundTripsWithoutMlpOrVectors) {
  CalibrationProfile p = TinyProfile(/*with_mlp=*/false);
  p.default_vectors.clear();
  p.pinned.cost.clear();
  const std::string path = (dir_ / "bare").string();  // no .json suffix
  ASSERT_TRUE(p.Save(path).ok());
  EXPECT_TRUE(std::filesystem::exists(dir_ / "bare.safetensors"));
  auto back = CalibrationProfile::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->mlp.has_value());
  EXPECT_TRUE(back->default_vectors.empty());
  EXPECT_TRUE(back->pinned.cost.empty());
}

TEST_F(CalibrationProfileTest, MissingFileIsNotFound) {
  auto p = CalibrationProfile::Load(json_);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr(json_));
  // JSON present, tensor file gone.
  ASSERT_TRUE(TinyProfile(false).Save(json_).ok());
  std::filesystem::remove(dir_ / "profile.safetensors");
  p = CalibrationProfile::Load(json_);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("tensor_file"));
}

TEST_F(CalibrationProfileTest, CorruptJsonIsInvalid) {
  WriteJson("{\"format\": \"vismoe-calibration-profile\", ");
  auto p = CalibrationProfile::Load(json_);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr(json_));
  WriteJson("[1, 2]");
  EXPECT_EQ(CalibrationProfile::Load(json_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CalibrationProfileTest, BadFieldsAreNamed) {
  struct Case {
    std::string from, to, field;
  };
  const std::vector<Case> cases = {
      {"\"num_experts\": 16", "\"num_experts\": \"16\"", "model.num_experts"},
      {"\"num_layers\": 4", "\"num_layers\": 0", "model.num_layers"},
      {"\"gamma\": 0.5", "\"gamma\": 1.5", "predictor.gamma"},
      {"\"prefetch_count\": 4", "\"prefetch_count\": 17", "predictor.prefetch_count"},
      {"\"chosen_pinned_layers\": 2", "\"chosen_pinned_layers\": 9", "pinned.chosen_pinned_layers"},
      {"3.5,", "-1.0,", "pinned.cost[0]"},
      {"\"random\": 0.25", "\"random\": 2", "hot_recall.random"},
      {"\"has_vision\": true", "\"has_vision\": 1", "model.has_vision"},
      {"\"window\": 3", "\"windows\": 3", "predictor.window"},
      {"\"version\": 2", "\"version\": 7", "version"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(TinyProfile(false).Save(json_).ok());
    EditJson(c.from, c.to);
    auto p = CalibrationProfile::Load(json_);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(p.status().message(), HasSubstr("'" + c.field + "'"));
    EXPECT_THAT(p.status().message(), HasSubstr(json_));
  }
}

// MoDES expert skipping (version 2): alpha(l) and the two thresholds.
SkipCalibration TinySkipping() {
  SkipCalibration s;
  s.alpha = {2.5f, 0.75f, 0.125f, 0.0f};
  s.tau_text = 0.0625f;  // exact in binary: the JSON text is predictable
  s.tau_visual = 0.25f;
  s.target_skip_rate = 0.3;
  s.skip_rate = 0.31;
  s.kl = 0.012;
  return s;
}

TEST_F(CalibrationProfileTest, ExpertSkippingRoundTrips) {
  CalibrationProfile p = TinyProfile(false);
  p.expert_skipping = TinySkipping();
  ASSERT_TRUE(p.Save(json_).ok());
  EXPECT_THAT(ReadJson(), HasSubstr("\"version\": 2"));
  auto back = CalibrationProfile::Load(json_);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->expert_skipping.has_value());
  const SkipCalibration& s = *back->expert_skipping;
  EXPECT_EQ(s.alpha, p.expert_skipping->alpha);
  EXPECT_EQ(s.tau_text, 0.0625f);
  EXPECT_EQ(s.tau_visual, 0.25f);
  EXPECT_DOUBLE_EQ(s.target_skip_rate, 0.3);
  EXPECT_DOUBLE_EQ(s.skip_rate, 0.31);
  EXPECT_DOUBLE_EQ(s.kl, 0.012);
  // Without the section: absent after a round trip.
  ASSERT_TRUE(TinyProfile(false).Save(json_).ok());
  back = CalibrationProfile::Load(json_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->expert_skipping.has_value());
}

TEST_F(CalibrationProfileTest, VersionOneProfilesStillLoad) {
  ASSERT_TRUE(TinyProfile(false).Save(json_).ok());
  EditJson("\"version\": 2", "\"version\": 1");
  auto back = CalibrationProfile::Load(json_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->expert_skipping.has_value());
  EXPECT_EQ(back->chosen_pinned_layers, 2);
  // A version 1 file cannot carry the version 2 section.
  CalibrationProfile p = TinyProfile(false);
  p.expert_skipping = TinySkipping();
  ASSERT_TRUE(p.Save(json_).ok());
  EditJson("\"version\": 2", "\"version\": 1");
  auto bad = CalibrationProfile::Load(json_);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'expert_skipping' needs version 2"));
}

TEST_F(CalibrationProfileTest, BadExpertSkippingFieldsAreNamed) {
  struct Case {
    std::string from, to, field;
  };
  const std::vector<Case> cases = {
      {"\"tau_text\": 0.0625", "\"tau_text\": -0.0625", "expert_skipping.tau_text"},
      {"\"tau_visual\": 0.25", "\"tau_visual\": \"big\"", "expert_skipping.tau_visual"},
      {"\"skip_rate\": 0.31", "\"skip_rate\": 1.5", "expert_skipping.skip_rate"},
      {"2.5,", "-2.5,", "expert_skipping.alpha[0]"},
      {"\"alpha\": [", "\"alpha\": [1.0, ", "expert_skipping.alpha"},
      {"\"kl\": 0.012", "\"kl_\": 0.012", "expert_skipping.kl"},
  };
  for (const Case& c : cases) {
    CalibrationProfile p = TinyProfile(false);
    p.expert_skipping = TinySkipping();
    ASSERT_TRUE(p.Save(json_).ok());
    EditJson(c.from, c.to);
    auto back = CalibrationProfile::Load(json_);
    EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(back.status().message(), HasSubstr("'" + c.field + "'"));
  }
}

TEST_F(CalibrationProfileTest, SaveRefusesBadExpertSkipping) {
  CalibrationProfile p = TinyProfile(false);
  p.expert_skipping = TinySkipping();
  p.expert_skipping->alpha.pop_back();  // 3 values for 4 layers
  absl::Status st = p.Save(json_);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("alpha has 3 values"));
  p.expert_skipping = TinySkipping();
  p.expert_skipping->tau_visual = -1.0f;
  EXPECT_THAT(p.Save(json_).message(), HasSubstr("tau_visual"));
  p.expert_skipping = TinySkipping();
  p.expert_skipping->skip_rate = 2.0;
  EXPECT_THAT(p.Save(json_).message(), HasSubstr("skip rates"));
}

TEST_F(CalibrationProfileTest, CommitMissRoundTripsAndBadFieldsAreNamed) {
  CalibrationProfile p = TinyProfile(false);
  p.commit_miss = CommitCalibration{0.875f, 0.5, 0.4921875, 1024};
  ASSERT_TRUE(p.Save(json_).ok());
  auto back = CalibrationProfile::Load(json_);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->commit_miss.has_value());
  EXPECT_EQ(back->commit_miss->threshold, 0.875f);
  EXPECT_DOUBLE_EQ(back->commit_miss->target_rate, 0.5);
  EXPECT_DOUBLE_EQ(back->commit_miss->uncertain_rate, 0.4921875);
  EXPECT_EQ(back->commit_miss->tokens, 1024);
  EXPECT_FALSE(back->expert_skipping.has_value());  // the sections are independent
  // A version 1 file may carry it too (readers before it ignore it).
  EditJson("\"version\": 2", "\"version\": 1");
  back = CalibrationProfile::Load(json_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->commit_miss.has_value());
  for (const auto& [from, to, field] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"threshold\": 0.875", "\"threshold\": -0.875", "commit_miss.threshold"},
           {"\"uncertain_rate\": 0.4921875", "\"uncertain_rate\": 2", "commit_miss.uncertain_rate"},
           {"\"tokens\": 1024", "\"tokens\": 10.5", "commit_miss.tokens"},
           {"\"target_rate\": 0.5", "\"target\": 0.5", "commit_miss.target_rate"}}) {
    ASSERT_TRUE(p.Save(json_).ok());
    EditJson(from, to);
    auto bad = CalibrationProfile::Load(json_);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(bad.status().message(), HasSubstr("'" + field + "'"));
  }
  p.commit_miss->threshold = std::nanf("");
  EXPECT_THAT(p.Save(json_).message(), HasSubstr("commit_miss"));
}

TEST_F(CalibrationProfileTest, WrongTensorShapesAreRejected) {
  // Default vectors of the wrong shape.
  ASSERT_TRUE(TinyProfile(false).Save(json_).ok());
  std::vector<float> dv(3 * 128);
  ASSERT_TRUE(WriteSafetensors((dir_ / "profile.safetensors").string(),
                               {{"router_lookahead.default_vectors",
                                 TensorView{dv.data(), DType::kF32, {3, 128}}}})
                  .ok());
  auto p = CalibrationProfile::Load(json_);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("router_lookahead.default_vectors"));
  EXPECT_THAT(p.status().message(), HasSubstr("[3, 128]"));

  // An MLP whose width does not fit the model's feature width.
  CalibrationProfile q = TinyProfile(true);
  q.num_experts = 8;
  q.prefetch_count = 4;
  ASSERT_TRUE(q.Save(json_).ok());
  p = CalibrationProfile::Load(json_);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("mlp"));

  // Save refuses default vectors of the wrong length.
  CalibrationProfile r = TinyProfile(false);
  r.default_vectors.resize(5);
  EXPECT_EQ(r.Save(json_).code(), absl::StatusCode::kInvalidArgument);
}

// A profile whose model has fewer experts than its prefetch count: loaded for
// the served model, the error is the model mismatch, not the prefetch count
// the smaller model puts out of range.
TEST_F(CalibrationProfileTest, LoadForAModelReportsTheMismatchFirst) {
  auto config = ModelConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(TinyProfile(false).Save(json_).ok());
  EXPECT_TRUE(CalibrationProfile::Load(json_, &*config).ok());
  EditJson("\"num_experts\": 16", "\"num_experts\": 2");
  auto p = CalibrationProfile::Load(json_, &*config);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.status().message(), HasSubstr("'num_experts' is 2 but the served model has 16"));
  EXPECT_THAT(p.status().message(), HasSubstr(json_));
  p = CalibrationProfile::Load(json_);  // on its own: its fields disagree
  EXPECT_THAT(p.status().message(), HasSubstr("predictor.prefetch_count"));
}

TEST_F(CalibrationProfileTest, CheckMatchesTinyFixture) {
  auto config = ModelConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  CalibrationProfile p = TinyProfile(false);
  EXPECT_TRUE(p.CheckMatches(*config).ok()) << p.CheckMatches(*config);
  p.num_experts = 32;
  absl::Status st = p.CheckMatches(*config);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("num_experts"));
  p = TinyProfile(false);
  p.model_type = "qwen3_moe";
  EXPECT_THAT(p.CheckMatches(*config).message(), HasSubstr("model_type"));
  p = TinyProfile(false);
  p.hidden_size = 64;
  EXPECT_THAT(p.CheckMatches(*config).message(), HasSubstr("hidden_size"));
  p = TinyProfile(false);
  p.num_layers = 5;
  EXPECT_THAT(p.CheckMatches(*config).message(), HasSubstr("num_layers"));
}

}  // namespace
}  // namespace vismoe
