#include "engine/calibrate/calibrator.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <list>
#include <memory>
#include <numeric>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/api/engine.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/calibrate/predictor_evaluator.h"
#include "engine/core/fnv1a.h"
#include "engine/core/status_macros.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/offload/memory_plan.h"
#include "engine/policy/expert_predictor_factory.h"
#include "engine/policy/observer_chain.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

using nlohmann::json;

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status ValidateOptions(const CalibratorOptions& o, size_t num_requests) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (o.model_path.empty()) return bad("--model is required");
  if (o.budget_bytes <= 0)
    return bad(absl::StrCat("--budget must be > 0 bytes, got ", o.budget_bytes));
  if (!(o.held_out > 0 && o.held_out < 1))
    return bad(absl::StrCat("--held_out must be in (0, 1), got ", o.held_out));
  if (o.window < 1) return bad(absl::StrCat("--window must be >= 1, got ", o.window));
  if (!(o.gamma > 0 && o.gamma <= 1))
    return bad(absl::StrCat("--gamma must be in (0, 1], got ", o.gamma));
  if (o.prefetch_count < 1)
    return bad(absl::StrCat("--prefetch_count must be >= 1, got ", o.prefetch_count));
  if (o.l_semantic < 0) return bad(absl::StrCat("--l_semantic must be >= 0, got ", o.l_semantic));
  if (!(o.copy_bandwidth > 0))
    return bad(absl::StrCat("--copy_bandwidth must be > 0 bytes/s, got ", o.copy_bandwidth));
  if (!(o.skip_target_rate >= 0 && o.skip_target_rate < 1)) {
    return bad(
        absl::StrCat("--skip_target_rate must be in [0, 1) (0 = off), got ", o.skip_target_rate));
  }
  if (!(o.commit_target_rate >= 0 && o.commit_target_rate < 1)) {
    return bad(absl::StrCat("--commit_target_rate must be in [0, 1) (0 = off), got ",
                            o.commit_target_rate));
  }
  if (o.skip_target_rate > 0 && o.skip_grid < 2) {
    return bad(absl::StrCat("--skip_grid must be >= 2, got ", o.skip_grid));
  }
  if (num_requests < 2) {
    return bad(absl::StrCat(
        "calibration needs at least 2 requests (one trains, one is held out), got ", num_requests));
  }
  return absl::OkStatus();
}

// Step 5: MoDES expert skipping on every request's prefill (greedy, no
// compression, exactly as the traces ran).
absl::StatusOr<SkipCalibrationReport> CalibrateSkipping(
    const CalibratorOptions& options, const std::vector<CalibrationRequest>& requests,
    const TextConfig& text, const std::vector<int>& moe_layers, Engine& engine) {
  SkipCalibratorOptions so;
  so.target_skip_rate = options.skip_target_rate;
  so.grid = options.skip_grid;
  so.num_layers = text.num_hidden_layers;
  so.moe_layers = moe_layers;
  auto prefill = [&](size_t r, const ExpertSkipping* rule,
                     RouterObserver* observer) -> absl::StatusOr<PrefillOutcome> {
    GenerateRequest req = requests[r].request;
    req.sampling.temperature = 0.0f;
    req.sampling.max_new_tokens = 1;  // the prefill only
    req.policy = PolicyOverrides{};
    req.policy.token_compressor = "none";
    PrefillOutcome out;
    GenerateCallbacks cb;
    cb.router_observer = observer;
    cb.expert_skipping = rule;
    cb.on_prefill_logits = [&out](absl::Span<const float> l) {
      out.logits.assign(l.begin(), l.end());
    };
    auto result = engine.Generate(req, cb);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat(requests[r].name, ": ", result.status().message()));
    }
    if (out.logits.empty()) {
      return absl::InternalError(absl::StrCat(requests[r].name, ": no prefill logits"));
    }
    out.counts = result->expert_skipping;
    return out;
  };
  return CalibrateExpertSkipping(so, requests.size(), prefill);
}

}  // namespace


int64_t SimulateLruMisses(const std::vector<std::vector<StepRecord>>& traces,
                          const std::vector<int>& offloaded_layers, int num_slabs) {
  // LRU over (layer, expert) keys: most recent at the front.
  std::list<int64_t> order;
  absl::flat_hash_map<int64_t, std::list<int64_t>::iterator> where;
  int64_t misses = 0;
  for (const auto& trace : traces) {
    for (const StepRecord& step : trace) {
      for (const LayerRecord& l : step.layers) {
        if (std::find(offloaded_layers.begin(), offloaded_layers.end(), l.layer) ==
            offloaded_layers.end()) {
          continue;
        }
        for (int e : l.experts) {
          const int64_t key = (static_cast<int64_t>(l.layer) << 32) | static_cast<uint32_t>(e);
          auto it = where.find(key);
          if (it != where.end()) {
            order.splice(order.begin(), order, it->second);
            continue;
          }
          ++misses;
          if (num_slabs <= 0) continue;
          if (static_cast<int>(order.size()) >= num_slabs) {
            where.erase(order.back());
            order.pop_back();
          }
          order.push_front(key);
          where[key] = order.begin();
        }
      }
    }
  }
  return misses;
}

absl::StatusOr<CalibrationReport> RunCalibration(const CalibratorOptions& options,
                                                 const std::vector<CalibrationRequest>& requests) {
  const auto start = std::chrono::steady_clock::now();
  VISMOE_RETURN_IF_ERROR(ValidateOptions(options, requests.size()));
  auto log = [&](const std::string& line) {
    if (options.progress != nullptr) *options.progress << "calibrate: " << line << std::endl;
  };

  VISMOE_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::Load(options.model_path));
  // The sizes of the plan. Synthetic weights are built twice (here and in the
  // engine): twice the host memory, for a study tool.
  std::unique_ptr<Checkpoint> checkpoint;
  if (options.synthetic_weights) {
    VISMOE_ASSIGN_OR_RETURN(const SyntheticRouting routing,
                            ParseSyntheticRouting(options.synthetic_routing));
    VISMOE_ASSIGN_OR_RETURN(checkpoint,
                            SynthesizeCheckpoint(config, options.synthetic_seed, nullptr,
                                                 "synthetic:" + options.model_path, routing));
  } else {
    VISMOE_ASSIGN_OR_RETURN(checkpoint, Checkpoint::Open(options.model_path));
  }
  const TextConfig& text = config.text;
  VISMOE_ASSIGN_OR_RETURN(ModelSizes sizes,
                          MeasureModelSizes(*checkpoint, text, Qwen3VlMoeModel::Experts(config)));
  const int num_moe = static_cast<int>(sizes.moe_layers.size());
  if (num_moe == 0 || sizes.num_experts <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.model_path, ": the model has no routed experts to calibrate"));
  }

  // Eq. 10's valid interval, checked before hours of tracing.
  const int64_t kv_bytes = int64_t{text.KvPlanes()} * text.num_hidden_layers *
                           options.max_context_tokens * text.KvRowElems() *
                           static_cast<int64_t>(sizeof(float));  // = KvCache::bytes()
  MemoryPlanOptions po;
  po.budget_bytes = options.budget_bytes;
  po.activation_bytes = options.activation_bytes;
  po.kv_cache_bytes = kv_bytes;
  const int64_t m_avail =
      options.budget_bytes - sizes.resident_bytes - po.activation_bytes - kv_bytes;
  const int max_valid = MaxPinnedLayers(m_avail, po.min_cache_slabs * sizes.expert_bytes,
                                        sizes.expert_bytes * sizes.num_experts, num_moe);
  if (max_valid < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--budget=", options.budget_bytes, " bytes is too small: the resident weights (",
        sizes.resident_bytes, ") + KV cache for ", options.max_context_tokens, " tokens (",
        kv_bytes, ") + activations (", po.activation_bytes, ") + one expert slab (",
        sizes.expert_bytes, ") need ",
        sizes.resident_bytes + kv_bytes + po.activation_bytes + sizes.expert_bytes));
  }

  CalibrationReport report;
  const int num_experts = text.num_experts;
  const int b = std::min(options.prefetch_count, num_experts);
  report.prefetch_count = b;
  report.expert_bytes = sizes.expert_bytes;

  // Split by request, seeded.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::shuffle(order.begin(), order.end(), rng);
  size_t n_test = static_cast<size_t>(options.held_out * requests.size() + 0.5);
  n_test = std::clamp<size_t>(n_test, 1, requests.size() - 1);
  std::vector<char> held_out(requests.size(), 0);
  for (size_t i = 0; i < n_test; ++i) held_out[order[i]] = 1;
  report.held_out_requests = static_cast<int>(n_test);
  report.train_requests = static_cast<int>(requests.size() - n_test);

  EngineOptions eo;
  eo.model_path = options.model_path;
  eo.backend = options.backend;
  eo.num_threads = options.num_threads;
  eo.max_context_tokens = options.max_context_tokens;
  eo.synthetic_weights = options.synthetic_weights;
  eo.synthetic_seed = options.synthetic_seed;
  eo.synthetic_routing = options.synthetic_routing;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo));

  auto run = [&](const CalibrationRequest& r, RouterObserver* observer) -> absl::Status {
    GenerateRequest req = r.request;
    // Greedy, or sampled with a seed of the request's own: either way every
    // pass over the request decodes the same tokens.
    req.sampling.temperature = options.temperature;
    req.sampling.seed = Fnv1a(r.name);  // the same in every build
    req.policy = PolicyOverrides{};
    req.policy.token_compressor = "none";
    GenerateCallbacks cb;
    cb.router_observer = observer;
    auto result = engine->Generate(req, cb);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat(r.name, ": ", result.status().message()));
    }
    report.prompt_tokens += result->usage.prompt_tokens;
    report.completion_tokens += result->usage.completion_tokens;
    log(absl::StrCat("  ", r.name, ": ", result->usage.prompt_tokens, " prompt tokens, ",
                     result->usage.completion_tokens, " generated"));
    return absl::OkStatus();
  };

  // Pass 1: traces of every request.
  std::vector<std::unique_ptr<RoutingTraceRecorder>> recorders;
  for (size_t i = 0; i < requests.size(); ++i) {
    log(absl::StrCat("trace ", i + 1, "/", requests.size(), " (",
                     held_out[i] ? "held out" : "train", ")"));
    recorders.push_back(std::make_unique<RoutingTraceRecorder>(text.hidden_size));
    VISMOE_RETURN_IF_ERROR(run(requests[i], recorders.back().get()));
  }

  CalibrationProfile& profile = report.profile;
  profile.model_type = config.model_type;
  profile.num_layers = text.num_hidden_layers;
  profile.num_experts = num_experts;
  profile.hidden_size = text.hidden_size;
  profile.has_vision = config.has_vision;
  profile.window = options.window;
  profile.gamma = options.gamma;
  profile.prefetch_count = b;
  profile.budget_bytes = options.budget_bytes;
  profile.pinned.l_semantic = options.l_semantic;

  // Default vectors d_l and mlp training data from the training split.
  std::vector<double> dv_sum(static_cast<size_t>(text.num_hidden_layers) * text.hidden_size, 0.0);
  std::vector<int64_t> dv_rows(text.num_hidden_layers, 0);
  std::vector<LookaheadSample> samples;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (held_out[i]) continue;
    const RoutingTraceRecorder& rec = *recorders[i];
    for (size_t l = 0; l < rec.moe_output_sum().size() && l < dv_rows.size(); ++l) {
      if (rec.moe_output_rows()[l] == 0) continue;
      dv_rows[l] += rec.moe_output_rows()[l];
      for (int d = 0; d < text.hidden_size; ++d)
        dv_sum[l * text.hidden_size + d] += rec.moe_output_sum()[l][d];
    }
    // h_v as the runtime predictor sees it: zeros for a text-only request on a
    // vision model, absent on a text model.
    std::vector<float> summary(config.has_vision ? text.hidden_size : 0, 0.0f);
    if (config.has_vision && rec.visual_summary().size() == summary.size()) {
      summary = rec.visual_summary();
    }
    for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
      for (auto& ex :
           BuildLookaheadExamples(rec.steps(), phase, summary, options.window, options.gamma)) {
        samples.push_back(std::move(ex.sample));
      }
    }
  }
  if (std::any_of(dv_rows.begin(), dv_rows.end(), [](int64_t n) { return n > 0; })) {
    profile.default_vectors.assign(dv_sum.size(), 0.0f);
    for (int l = 0; l < text.num_hidden_layers; ++l) {
      if (dv_rows[l] == 0) continue;
      for (int d = 0; d < text.hidden_size; ++d) {
        profile.default_vectors[l * text.hidden_size + d] =
            static_cast<float>(dv_sum[l * text.hidden_size + d] / dv_rows[l]);
      }
    }
  }
  MlpTrainOptions train = options.train;
  train.seed = options.seed;
  report.train_samples = static_cast<int>(samples.size());
  if (samples.size() >= 2) {
    log(absl::StrCat("training mlp-lookahead on ", samples.size(), " samples (", train.epochs,
                     " epochs, ", train.hidden1, "-", train.hidden2, " hidden)"));
    VISMOE_ASSIGN_OR_RETURN(MlpLookahead mlp,
                            TrainMlpLookahead(samples, train, &report.train_loss));
    report.train_epochs = train.epochs;
    log(absl::StrCat("trained: final loss ", report.train_loss));
    profile.mlp = std::move(mlp);
  } else {
    log(absl::StrCat("only ", samples.size(), " training samples: no mlp-lookahead"));
    report.train_samples = 0;
  }

  // Pass 2: held-out requests with the predictors observing.
  OffloadOptions oo;
  oo.prefetch_count = b;
  oo.lookahead_window = options.window;
  std::vector<std::string> kinds = {"history", "router-lookahead"};
  if (profile.mlp.has_value()) kinds.push_back("mlp-lookahead");
  std::vector<std::unique_ptr<PredictorEvaluator>> evals;
  for (const std::string& kind : kinds) {
    VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertPredictor> p,
                            MakeExpertPredictor(kind, config, *checkpoint, oo, &profile));
    evals.push_back(std::make_unique<PredictorEvaluator>(std::move(p), sizes.moe_layers, b,
                                                         text.num_hidden_layers));
  }
  for (size_t i = 0, k = 0; i < requests.size(); ++i) {
    if (!held_out[i]) continue;
    log(absl::StrCat("evaluate ", ++k, "/", n_test));
    ObserverChain chain(
        {evals[0].get(), evals[1].get(), evals.size() > 2 ? evals[2].get() : nullptr});
    for (auto& e : evals) e->BeginRequest();
    VISMOE_RETURN_IF_ERROR(run(requests[i], chain.Head()));
  }
  for (size_t k = 0; k < kinds.size(); ++k) {
    report.certainty[kinds[k]] = evals[k]->certainty();
    report.recall[kinds[k]] = evals[k]->tally();
    profile.hot_recall[kinds[k]] = evals[k]->tally().Overall();
  }
  if (profile.mlp.has_value()) report.mlp_layer_recall = evals[2]->per_layer();
  report.random_recall = static_cast<double>(b) / num_experts;
  profile.hot_recall["random"] = report.random_recall;

  if (options.skip_target_rate > 0) {
    log(absl::StrCat("expert skipping: GMLG over ", num_moe, " MoE layers, frontier search for a ",
                     options.skip_target_rate, " skip rate on ", requests.size(), " prefills"));
    VISMOE_ASSIGN_OR_RETURN(report.skipping,
                            CalibrateSkipping(options, requests, text, sizes.moe_layers, *engine));
    profile.expert_skipping = report.skipping->calibration;
    const SkipCalibration& s = *profile.expert_skipping;
    log(absl::StrCat("expert skipping: tau_text ", s.tau_text, ", tau_visual ", s.tau_visual,
                     ", skip rate ", s.skip_rate, ", KL ", s.kl, " (",
                     report.skipping->search.evaluations, " frontier evaluations)"));
  }

  // Eq. 10 costs (and the commit threshold) from the traces.
  std::vector<std::vector<StepRecord>> traces;
  for (const auto& r : recorders) traces.push_back(r->steps());
  if (options.commit_target_rate > 0) {
    VISMOE_ASSIGN_OR_RETURN(report.commit,
                            CalibrateCommitThreshold(traces, sizes.moe_layers, options.l_semantic,
                                                     options.commit_target_rate));
    profile.commit_miss = report.commit->calibration;
    log(absl::StrCat("commit miss policy: certainty threshold ", profile.commit_miss->threshold,
                     " (", profile.commit_miss->uncertain_rate, " of ", profile.commit_miss->tokens,
                     " decode token-layers below it)"));
  }
  report.max_valid_pinned = max_valid;
  for (int l = 0; l <= max_valid; ++l) {
    po.pinned_layers = l;
    VISMOE_ASSIGN_OR_RETURN(MemoryPlan plan, MakeMemoryPlan(sizes, po));
    const int64_t misses = SimulateLruMisses(traces, plan.offloaded_layer_ids, plan.num_slabs);
    report.misses.push_back(misses);
    report.num_slabs.push_back(plan.num_slabs);
    profile.pinned.cost.push_back(static_cast<double>(misses) * sizes.expert_bytes /
                                  options.copy_bandwidth);
  }
  profile.chosen_pinned_layers = ChoosePinnedLayers(profile.pinned, max_valid);
  log(absl::StrCat("L_pinned = ", profile.chosen_pinned_layers, " (valid [",
                   std::min(options.l_semantic, max_valid), ", ", max_valid, "])"));
  report.seconds = Seconds(start);
  return report;
}

std::string CalibrationReport::ToJson() const {
  json j;
  auto recall_json = [](const RecallTally& t) {
    return json{{"prefill", t.Recall(0)},
                {"decode", t.Recall(1)},
                {"all", t.Overall()},
                {"needed", t.needed[0] + t.needed[1]}};
  };
  j["prefetch_count"] = prefetch_count;
  j["hot_recall"]["random"] = {
      {"prefill", random_recall}, {"decode", random_recall}, {"all", random_recall}};
  for (const auto& [name, t] : recall) j["hot_recall"][name] = recall_json(t);
  json layers = json::array();
  for (size_t l = 0; l < mlp_layer_recall.size(); ++l) {
    const RecallTally& t = mlp_layer_recall[l];
    if (t.needed[0] + t.needed[1] == 0) continue;
    json row = recall_json(t);
    row["layer"] = l;
    layers.push_back(row);
  }
  j["mlp_layer_hot_recall"] = layers;
  j["training"] = {{"samples", train_samples},
                   {"epochs", train_epochs},
                   {"final_loss", train_loss},
                   {"train_requests", train_requests},
                   {"held_out_requests", held_out_requests}};
  json costs = json::array();
  for (size_t l = 0; l < profile.pinned.cost.size(); ++l) {
    costs.push_back({{"pinned_layers", l},
                     {"num_slabs", num_slabs[l]},
                     {"misses", misses[l]},
                     {"cost_seconds", profile.pinned.cost[l]}});
  }
  j["pinned"] = {{"budget_bytes", profile.budget_bytes},
                 {"expert_bytes", expert_bytes},
                 {"l_semantic", profile.pinned.l_semantic},
                 {"max_valid", max_valid_pinned},
                 {"costs", costs},
                 {"chosen", profile.chosen_pinned_layers}};
  if (skipping.has_value()) {
    const SkipCalibration& c = skipping->calibration;
    json frontier = json::array();
    for (const FrontierPoint& p : skipping->search.frontier) {
      frontier.push_back({{"tau_text", skipping->grid[p.i]},
                          {"tau_visual", skipping->grid[p.j]},
                          {"skip_rate", p.skip_rate},
                          {"kl", p.kl}});
    }
    j["expert_skipping"] = {{"alpha", c.alpha},
                            {"grid", skipping->grid},
                            {"target_skip_rate", c.target_skip_rate},
                            {"tau_text", c.tau_text},
                            {"tau_visual", c.tau_visual},
                            {"skip_rate", c.skip_rate},
                            {"text_skip_rate", skipping->text_skip_rate},
                            {"visual_skip_rate", skipping->visual_skip_rate},
                            {"kl", c.kl},
                            {"frontier", frontier},
                            {"evaluations", skipping->search.evaluations}};
  }
  if (commit.has_value()) j["commit_miss"] = CommitJson();
  j["tokens"] = {{"prompt", prompt_tokens}, {"completion", completion_tokens}};
  j["seconds"] = seconds;
  return j.dump(2);
}

nlohmann::json CalibrationReport::CommitJson() const {
  const CommitCalibration& c = commit->calibration;
  json layers = json::array();
  for (const CommitCalibrationReport::Layer& l : commit->layers) {
    layers.push_back(
        {{"layer", l.layer},
         {"tokens", l.tokens},
         {"uncertain_rate", l.tokens > 0 ? static_cast<double>(l.uncertain) / l.tokens : 0.0},
         {"mean_certainty", l.mean_certainty}});
  }
  // Paper 003's Figure 2: mean certainty by correctly predicted experts.
  json by_correct = json::object();
  for (const auto& [name, t] : certainty) {
    json rows = json::array();
    for (size_t c = 0; c < t.tokens.size(); ++c) {
      rows.push_back({{"correct", c},
                      {"tokens", t.tokens[c]},
                      {"mean_certainty", t.MeanCertainty(static_cast<int>(c))}});
    }
    by_correct[name] = rows;
  }
  return {{"threshold", c.threshold},
          {"target_rate", c.target_rate},
          {"uncertain_rate", c.uncertain_rate},
          {"tokens", c.tokens},
          {"layers", layers},
          {"certainty_by_correct", by_correct}};
}

}  // namespace vismoe
