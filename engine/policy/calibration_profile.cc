#include "engine/policy/calibration_profile.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/safetensors_file.h"
#include "engine/model/safetensors_writer.h"
#include "engine/policy/lookahead_features.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "vismoe-calibration-profile";
constexpr int kVersion = 2;     // written
constexpr int kMinVersion = 1;  // still read: no expert_skipping
constexpr const char* kDefaultVectors = "router_lookahead.default_vectors";

std::string TensorPathFor(const std::string& json_path) {
  constexpr std::string_view kJson = ".json";
  if (json_path.size() > kJson.size() &&
      json_path.compare(json_path.size() - kJson.size(), kJson.size(), kJson) == 0) {
    return json_path.substr(0, json_path.size() - kJson.size()) + ".safetensors";
  }
  return json_path + ".safetensors";
}

// Reads typed fields out of a JSON object; every error names file and field.
class FieldReader {
 public:
  FieldReader(const std::string& file, const json& root) : file_(file), root_(root) {}

  // The value at `path` (dotted, e.g. "model.num_layers"), or an error.
  absl::StatusOr<const json*> Find(const std::string& path) const {
    const json* node = &root_;
    size_t begin = 0;
    while (begin <= path.size()) {
      const size_t dot = path.find('.', begin);
      const std::string key =
          path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
      if (!node->is_object() || !node->contains(key)) return Error(path, "is missing");
      node = &(*node)[key];
      if (dot == std::string::npos) break;
      begin = dot + 1;
    }
    return node;
  }

  absl::StatusOr<int64_t> Int(const std::string& path, int64_t lo, int64_t hi) const {
    auto node = Find(path);
    if (!node.ok()) return node.status();
    if (!(*node)->is_number_integer()) return Error(path, "must be an integer");
    const int64_t v = (*node)->get<int64_t>();
    if (v < lo || v > hi) {
      return Error(path, absl::StrCat("is ", v, ", expected a value in [", lo, ", ", hi, "]"));
    }
    return v;
  }

  absl::StatusOr<double> Number(const std::string& path, double lo, double hi) const {
    auto node = Find(path);
    if (!node.ok()) return node.status();
    return CheckNumber(path, **node, lo, hi);
  }

  absl::StatusOr<double> CheckNumber(const std::string& path, const json& v, double lo,
                                     double hi) const {
    if (!v.is_number()) return Error(path, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
      return Error(path, absl::StrCat("is ", d, ", expected a value in [", lo, ", ", hi, "]"));
    }
    return d;
  }

  absl::StatusOr<std::string> String(const std::string& path) const {
    auto node = Find(path);
    if (!node.ok()) return node.status();
    if (!(*node)->is_string()) return Error(path, "must be a string");
    return (*node)->get<std::string>();
  }

  absl::StatusOr<bool> Bool(const std::string& path) const {
    auto node = Find(path);
    if (!node.ok()) return node.status();
    if (!(*node)->is_boolean()) return Error(path, "must be true or false");
    return (*node)->get<bool>();
  }

  absl::Status Error(const std::string& path, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration profile ", file_, ": field '", path, "' ", what));
  }

 private:
  const std::string& file_;
  const json& root_;
};

bool HasField(const FieldReader& r, const std::string& key) { return r.Find(key).ok(); }

// The "expert_skipping" section (paper 001's alpha(l) and thresholds).
absl::Status ParseSkipping(const FieldReader& r, int64_t num_layers, SkipCalibration* s) {
  VISMOE_ASSIGN_OR_RETURN(const json* alpha, r.Find("expert_skipping.alpha"));
  if (!alpha->is_array() || static_cast<int64_t>(alpha->size()) != num_layers) {
    return r.Error("expert_skipping.alpha",
                   absl::StrCat("must be an array of num_layers = ", num_layers, " numbers"));
  }
  for (size_t i = 0; i < alpha->size(); ++i) {
    VISMOE_ASSIGN_OR_RETURN(double a, r.CheckNumber(absl::StrCat("expert_skipping.alpha[", i, "]"),
                                                    (*alpha)[i], 0.0, HUGE_VAL));
    s->alpha.push_back(static_cast<float>(a));
  }
  VISMOE_ASSIGN_OR_RETURN(double tt, r.Number("expert_skipping.tau_text", 0.0, HUGE_VAL));
  VISMOE_ASSIGN_OR_RETURN(double tv, r.Number("expert_skipping.tau_visual", 0.0, HUGE_VAL));
  s->tau_text = static_cast<float>(tt);
  s->tau_visual = static_cast<float>(tv);
  VISMOE_ASSIGN_OR_RETURN(s->target_skip_rate,
                          r.Number("expert_skipping.target_skip_rate", 0.0, 1.0));
  VISMOE_ASSIGN_OR_RETURN(s->skip_rate, r.Number("expert_skipping.skip_rate", 0.0, 1.0));
  VISMOE_ASSIGN_OR_RETURN(s->kl, r.Number("expert_skipping.kl", 0.0, HUGE_VAL));
  return absl::OkStatus();
}

// The "commit_miss" section (paper 003's certainty threshold).
absl::Status ParseCommit(const FieldReader& r, CommitCalibration* c) {
  VISMOE_ASSIGN_OR_RETURN(double t, r.Number("commit_miss.threshold", 0.0, HUGE_VAL));
  c->threshold = static_cast<float>(t);
  VISMOE_ASSIGN_OR_RETURN(c->target_rate, r.Number("commit_miss.target_rate", 0.0, 1.0));
  VISMOE_ASSIGN_OR_RETURN(c->uncertain_rate, r.Number("commit_miss.uncertain_rate", 0.0, 1.0));
  VISMOE_ASSIGN_OR_RETURN(c->tokens, r.Int("commit_miss.tokens", 0, INT64_MAX));
  return absl::OkStatus();
}

// Parses the header and the "model" section into `p`.
absl::Status ParseModel(const FieldReader& r, CalibrationProfile* p) {
  VISMOE_ASSIGN_OR_RETURN(std::string format, r.String("format"));
  if (format != kFormat) return r.Error("format", absl::StrCat("is '", format, "'"));
  VISMOE_ASSIGN_OR_RETURN(p->model_type, r.String("model.model_type"));
  VISMOE_ASSIGN_OR_RETURN(int64_t num_layers, r.Int("model.num_layers", 1, 1 << 16));
  VISMOE_ASSIGN_OR_RETURN(int64_t num_experts, r.Int("model.num_experts", 1, 1 << 20));
  VISMOE_ASSIGN_OR_RETURN(int64_t hidden, r.Int("model.hidden_size", 1, 1 << 20));
  p->num_layers = static_cast<int>(num_layers);
  p->num_experts = static_cast<int>(num_experts);
  p->hidden_size = static_cast<int>(hidden);
  VISMOE_ASSIGN_OR_RETURN(p->has_vision, r.Bool("model.has_vision"));
  return absl::OkStatus();
}

// Parses the rest of the JSON part into `p` (everything but the tensors).
// REQUIRES: ParseModel(r, p) succeeded.
absl::Status ParseJson(const FieldReader& r, CalibrationProfile* p, std::string* tensor_file,
                       bool* has_mlp, float* bn_eps, bool* has_default_vectors) {
  VISMOE_ASSIGN_OR_RETURN(const int64_t version, r.Int("version", kMinVersion, kVersion));
  VISMOE_ASSIGN_OR_RETURN(*tensor_file, r.String("tensor_file"));
  if (tensor_file->empty()) return r.Error("tensor_file", "is empty");
  const int64_t num_layers = p->num_layers;
  const int64_t num_experts = p->num_experts;

  VISMOE_ASSIGN_OR_RETURN(int64_t window, r.Int("predictor.window", 1, 1 << 16));
  VISMOE_ASSIGN_OR_RETURN(double gamma, r.Number("predictor.gamma", 0.0, 1.0));
  if (gamma <= 0.0) return r.Error("predictor.gamma", "must be > 0");
  VISMOE_ASSIGN_OR_RETURN(int64_t b, r.Int("predictor.prefetch_count", 1, num_experts));
  p->window = static_cast<int>(window);
  p->gamma = static_cast<float>(gamma);
  p->prefetch_count = static_cast<int>(b);

  VISMOE_ASSIGN_OR_RETURN(int64_t l_sem, r.Int("pinned.l_semantic", 0, num_layers));
  p->pinned.l_semantic = static_cast<int>(l_sem);
  VISMOE_ASSIGN_OR_RETURN(const json* cost, r.Find("pinned.cost"));
  if (!cost->is_array()) return r.Error("pinned.cost", "must be an array of numbers");
  if (static_cast<int64_t>(cost->size()) > num_layers + 1) {
    return r.Error("pinned.cost", absl::StrCat("has ", cost->size(), " entries, at most ",
                                               num_layers + 1, " (L = 0..num_layers)"));
  }
  p->pinned.cost.clear();
  for (size_t i = 0; i < cost->size(); ++i) {
    VISMOE_ASSIGN_OR_RETURN(
        double c, r.CheckNumber(absl::StrCat("pinned.cost[", i, "]"), (*cost)[i], 0.0, HUGE_VAL));
    p->pinned.cost.push_back(c);
  }
  VISMOE_ASSIGN_OR_RETURN(p->budget_bytes, r.Int("pinned.budget_bytes", 0, INT64_MAX));
  VISMOE_ASSIGN_OR_RETURN(int64_t chosen, r.Int("pinned.chosen_pinned_layers", -1, num_layers));
  p->chosen_pinned_layers = static_cast<int>(chosen);

  VISMOE_ASSIGN_OR_RETURN(*has_mlp, r.Bool("mlp.present"));
  if (*has_mlp) {
    VISMOE_ASSIGN_OR_RETURN(double eps, r.Number("mlp.bn_eps", 0.0, 1.0));
    *bn_eps = static_cast<float>(eps);
  }
  VISMOE_ASSIGN_OR_RETURN(*has_default_vectors, r.Bool("router_lookahead.default_vectors"));

  VISMOE_ASSIGN_OR_RETURN(const json* recall, r.Find("hot_recall"));
  if (!recall->is_object()) return r.Error("hot_recall", "must be an object");
  p->hot_recall.clear();
  for (const auto& [name, value] : recall->items()) {
    VISMOE_ASSIGN_OR_RETURN(double v,
                            r.CheckNumber(absl::StrCat("hot_recall.", name), value, 0.0, 1.0));
    p->hot_recall[name] = v;
  }
  if (version >= 2 && HasField(r, "expert_skipping")) {
    SkipCalibration skip;
    VISMOE_RETURN_IF_ERROR(ParseSkipping(r, num_layers, &skip));
    p->expert_skipping = std::move(skip);
  } else if (HasField(r, "expert_skipping")) {
    return r.Error("expert_skipping", "needs version 2");
  }
  if (HasField(r, "commit_miss")) {
    CommitCalibration commit;
    VISMOE_RETURN_IF_ERROR(ParseCommit(r, &commit));
    p->commit_miss = commit;
  }
  return absl::OkStatus();
}

// InvalidArgument unless p.expert_skipping is absent or what Load accepts:
// num_layers alphas, thresholds and KL finite and >= 0, rates in [0, 1].
absl::Status CheckSkippingForSave(const CalibrationProfile& p, const std::string& json_path) {
  if (!p.expert_skipping.has_value()) return absl::OkStatus();
  const SkipCalibration& s = *p.expert_skipping;
  ExpertSkipping rule{s.alpha, s.tau_text, s.tau_visual};
  absl::Status valid = s.alpha.empty() ? absl::InvalidArgumentError("alpha is empty")
                                       : ValidateExpertSkipping(rule, p.num_layers);
  const bool rates = s.target_skip_rate >= 0 && s.target_skip_rate <= 1 && s.skip_rate >= 0 &&
                     s.skip_rate <= 1 && std::isfinite(s.kl) && s.kl >= 0;
  if (valid.ok() && !rates) {
    valid = absl::InvalidArgumentError("skip rates must be in [0, 1] and kl finite and >= 0");
  }
  if (valid.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("CalibrationProfile::Save(", json_path,
                                                 "): expert_skipping: ", valid.message()));
}

// InvalidArgument unless p.commit_miss is absent or what Load accepts.
absl::Status CheckCommitForSave(const CalibrationProfile& p, const std::string& json_path) {
  if (!p.commit_miss.has_value()) return absl::OkStatus();
  const CommitCalibration& c = *p.commit_miss;
  if (std::isfinite(c.threshold) && c.threshold >= 0 && c.target_rate >= 0 && c.target_rate <= 1 &&
      c.uncertain_rate >= 0 && c.uncertain_rate <= 1 && c.tokens >= 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("CalibrationProfile::Save(", json_path, "): commit_miss: threshold ",
                   c.threshold, " must be finite and >= 0, rates ", c.target_rate, " and ",
                   c.uncertain_rate, " in [0, 1], tokens ", c.tokens, " >= 0"));
}

}  // namespace

absl::Status CalibrationProfile::Save(const std::string& json_path) const {
  if (!default_vectors.empty() &&
      default_vectors.size() != static_cast<size_t>(num_layers) * hidden_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CalibrationProfile::Save(", json_path, "): default_vectors has ",
                     default_vectors.size(), " values, expected num_layers * hidden_size = ",
                     static_cast<int64_t>(num_layers) * hidden_size));
  }
  for (double c : pinned.cost) {
    if (!std::isfinite(c) || c < 0) {
      return absl::InvalidArgumentError(absl::StrCat("CalibrationProfile::Save(", json_path,
                                                     "): pinned.cost has a value ", c,
                                                     " (must be finite and >= 0)"));
    }
  }
  VISMOE_RETURN_IF_ERROR(CheckSkippingForSave(*this, json_path));
  VISMOE_RETURN_IF_ERROR(CheckCommitForSave(*this, json_path));
  const std::string tensor_path = TensorPathFor(json_path);
  std::vector<std::pair<std::string, TensorView>> tensors;
  if (mlp.has_value()) tensors = mlp->Tensors();
  if (!default_vectors.empty()) {
    tensors.push_back({kDefaultVectors,
                       TensorView{default_vectors.data(), DType::kF32, {num_layers, hidden_size}}});
  }
  VISMOE_RETURN_IF_ERROR(WriteSafetensors(tensor_path, tensors, {{"kind", kFormat}}));

  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["tensor_file"] = std::filesystem::path(tensor_path).filename().string();
  j["model"] = {{"model_type", model_type},
                {"num_layers", num_layers},
                {"num_experts", num_experts},
                {"hidden_size", hidden_size},
                {"has_vision", has_vision}};
  j["predictor"] = {{"window", window}, {"gamma", gamma}, {"prefetch_count", prefetch_count}};
  j["pinned"] = {{"l_semantic", pinned.l_semantic},
                 {"cost", pinned.cost},
                 {"budget_bytes", budget_bytes},
                 {"chosen_pinned_layers", chosen_pinned_layers}};
  j["mlp"] = {{"present", mlp.has_value()}};
  if (mlp.has_value()) {
    j["mlp"]["bn_eps"] = mlp->weights().bn_eps;
    j["mlp"]["input_dim"] = mlp->input_dim();
    j["mlp"]["hidden1"] = mlp->weights().l1.out;
    j["mlp"]["hidden2"] = mlp->weights().l2.out;
  }
  j["router_lookahead"] = {{"default_vectors", !default_vectors.empty()}};
  j["hot_recall"] = json::object();
  for (const auto& [name, v] : hot_recall) j["hot_recall"][name] = v;
  if (expert_skipping.has_value()) {
    const SkipCalibration& s = *expert_skipping;
    j["expert_skipping"] = {{"alpha", s.alpha},           {"tau_text", s.tau_text},
                            {"tau_visual", s.tau_visual}, {"target_skip_rate", s.target_skip_rate},
                            {"skip_rate", s.skip_rate},   {"kl", s.kl}};
  }

  if (commit_miss.has_value()) {
    const CommitCalibration& c = *commit_miss;
    j["commit_miss"] = {{"threshold", c.threshold},
                        {"target_rate", c.target_rate},
                        {"uncertain_rate", c.uncertain_rate},
                        {"tokens", c.tokens}};
  }

  std::string text;
  try {
    text = j.dump(2);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("CalibrationProfile::Save(", json_path, "): cannot encode JSON: ", e.what()));
  }
  const std::string tmp = json_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, json_path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", json_path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CalibrationProfile> CalibrationProfile::Load(const std::string& json_path,
                                                            const ModelConfig* served) {
  std::ifstream in(json_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("calibration profile ", json_path, " not found"));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const json root = json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration profile ", json_path, " is not a JSON object"));
  }
  CalibrationProfile p;
  std::string tensor_file;
  bool has_mlp = false, has_dv = false;
  float bn_eps = 1e-5f;
  const FieldReader r(json_path, root);
  VISMOE_RETURN_IF_ERROR(ParseModel(r, &p));
  if (served != nullptr) {
    const absl::Status match = p.CheckMatches(*served);
    if (!match.ok()) {
      return absl::Status(match.code(),
                          absl::StrCat("calibration profile ", json_path, ": ", match.message()));
    }
  }
  VISMOE_RETURN_IF_ERROR(ParseJson(r, &p, &tensor_file, &has_mlp, &bn_eps, &has_dv));

  std::filesystem::path tpath(tensor_file);
  if (tpath.is_relative()) tpath = std::filesystem::path(json_path).parent_path() / tpath;
  auto file = SafetensorsFile::Open(tpath.string());
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("calibration profile ", json_path,
                                     ": tensor_file: ", file.status().message()));
  }
  const SafetensorsFile& st = **file;
  if (has_mlp) {
    auto m = MlpLookahead::FromFile(st, bn_eps);
    if (!m.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration profile ", json_path, ": mlp: ", m.status().message()));
    }
    const int want_in = LookaheadFeatureWidth(p.num_experts, p.hidden_size, p.has_vision);
    if (m->input_dim() != want_in || m->num_experts() != p.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration profile ", json_path, ": mlp maps ", m->input_dim(),
                       " features to ", m->num_experts(), " experts, expected ", want_in, " -> ",
                       p.num_experts, " for this model"));
    }
    p.mlp = std::move(*m);
  } else if (st.Contains("mlp.l1.w")) {
    return r.Error("mlp.present", absl::StrCat("is false but ", st.path(), " holds mlp tensors"));
  }
  if (has_dv) {
    auto dv = st.Get(kDefaultVectors);
    if (!dv.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration profile ", json_path, ": ", dv.status().message()));
    }
    if (dv->rank() != 2 || dv->dim(0) != p.num_layers || dv->dim(1) != p.hidden_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration profile ", json_path, ": ", kDefaultVectors, " in ", st.path(),
                       " has shape ", dv->ShapeString(), ", expected [", p.num_layers, ", ",
                       p.hidden_size, "]"));
    }
    p.default_vectors.resize(dv->numel());
    ToFloat(dv->dtype, dv->data, dv->numel(), p.default_vectors.data());
  } else if (st.Contains(kDefaultVectors)) {
    return r.Error("router_lookahead.default_vectors",
                   absl::StrCat("is false but ", st.path(), " holds ", kDefaultVectors));
  }
  return p;
}

absl::Status CalibrationProfile::CheckMatches(const ModelConfig& config) const {
  auto differ = [](const char* field, const auto& have, const auto& want) {
    return absl::FailedPreconditionError(absl::StrCat("calibration profile field '", field, "' is ",
                                                      have, " but the served model has ", want,
                                                      ": recalibrate for this model"));
  };
  if (model_type != config.model_type) return differ("model_type", model_type, config.model_type);
  if (num_layers != config.text.num_hidden_layers)
    return differ("num_layers", num_layers, config.text.num_hidden_layers);
  if (num_experts != config.text.num_experts)
    return differ("num_experts", num_experts, config.text.num_experts);
  if (hidden_size != config.text.hidden_size)
    return differ("hidden_size", hidden_size, config.text.hidden_size);
  if (has_vision != config.has_vision)
    return differ("has_vision", has_vision ? "true" : "false",
                  config.has_vision ? "true" : "false");
  return absl::OkStatus();
}

}  // namespace vismoe
