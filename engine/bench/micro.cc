#include "engine/bench/micro.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/calibrate/mlp_trainer.h"
#include "engine/core/stats_sink.h"
#include "engine/core/status_macros.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/policy/history_predictor.h"
#include "engine/policy/lookahead_features.h"
#include "engine/policy/mlp_lookahead.h"
#include "engine/policy/router_lookahead_predictor.h"
#include "engine/policy/token_compressor.h"
#include "engine/runtime/sampler.h"

namespace vismoe::bench {
namespace {

constexpr int64_t kMinCalls = 10;
constexpr int64_t kMaxCalls = 100000;

// Keeps results alive so the timed calls cannot be optimised away.
volatile double g_sink = 0;

// Times fn() per call after one untimed warm-up call.
MicroResult TimeCalls(std::string name, double min_seconds, const std::function<double()>& fn) {
  using Clock = std::chrono::steady_clock;
  g_sink = g_sink + fn();
  std::vector<double> us;
  double timed = 0;
  while (static_cast<int64_t>(us.size()) < kMaxCalls &&
         (timed < min_seconds || static_cast<int64_t>(us.size()) < kMinCalls)) {
    const Clock::time_point t0 = Clock::now();
    const double v = fn();
    const Clock::time_point t1 = Clock::now();
    g_sink = g_sink + v;
    const double s = std::chrono::duration<double>(t1 - t0).count();
    timed += s;
    us.push_back(s * 1e6);
  }
  MicroResult r;
  r.name = std::move(name);
  r.calls = static_cast<int64_t>(us.size());
  r.mean_us = timed * 1e6 / static_cast<double>(r.calls);
  std::sort(us.begin(), us.end());
  // Nearest-rank percentiles.
  auto pct = [&](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(us.size())));
    return us[std::clamp<size_t>(rank, 1, us.size()) - 1];
  };
  r.p50_us = pct(0.50);
  r.p99_us = pct(0.99);
  return r;
}

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Random MlpLookahead of the trainer's default shape (BatchNorm at identity
// statistics), so Predict does exactly the work of a trained one.
MlpLookahead RandomMlp(std::mt19937_64& rng, int in, int h1, int h2, int out) {
  auto layer = [&](int i, int o, bool bn) {
    MlpLayer l;
    l.in = i;
    l.out = o;
    const float s = 1.0f / std::sqrt(static_cast<float>(i));
    l.w = RandomVector(rng, static_cast<size_t>(i) * o, -s, s);
    l.b = RandomVector(rng, o, -s, s);
    if (bn) {
      l.bn_gamma.assign(o, 1.0f);
      l.bn_beta.assign(o, 0.0f);
      l.bn_mean.assign(o, 0.0f);
      l.bn_var.assign(o, 1.0f);
    }
    return l;
  };
  MlpLookaheadWeights w;
  w.l1 = layer(in, h1, true);
  w.l2 = layer(h1, h2, true);
  w.lo = layer(h2, out, false);
  return MlpLookahead(std::move(w));
}

absl::Status CompressorBenchmarks(const TextConfig& t, const MicroOptions& o, std::mt19937_64& rng,
                                  std::vector<MicroResult>* out) {
  const int slots = std::max(1, o.pinned_layers);
  const int per_token = slots * t.num_experts_per_tok;
  for (const char* kind : {"random", "saliency", "affinity"}) {
    TokenCompressorOptions co;
    co.kind = kind;
    co.beta = o.keep_ratio;
    co.alpha = std::min(co.alpha, o.keep_ratio);
    VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<TokenCompressor> c, MakeTokenCompressor(co));
    for (int64_t n : {256, 1024, 4096}) {
      const std::vector<float> saliency = RandomVector(rng, n, 0.0f, 1.0f);
      // Distinct top-k experts per (token, prefix layer), ids slot * E + e as
      // CompressionSession builds them.
      std::vector<int> experts(static_cast<size_t>(n) * per_token);
      std::vector<int> ids(t.num_experts);
      for (int64_t i = 0; i < n; ++i) {
        for (int s = 0; s < slots; ++s) {
          for (int e = 0; e < t.num_experts; ++e) ids[e] = e;
          std::shuffle(ids.begin(), ids.end(), rng);
          for (int k = 0; k < t.num_experts_per_tok; ++k) {
            experts[i * per_token + s * t.num_experts_per_tok + k] = s * t.num_experts + ids[k];
          }
        }
      }
      CompressionInput in;
      in.num_tokens = n;
      in.saliency = saliency;
      in.active_experts = experts;
      in.experts_per_token = per_token;
      VISMOE_RETURN_IF_ERROR(c->Select(in).status());
      out->push_back(TimeCalls(absl::StrCat("compress.", kind, ".n", n), o.min_seconds, [&] {
        auto kept = c->Select(in);
        return kept.ok() ? static_cast<double>(kept->size()) : -1.0;
      }));
    }
  }
  return absl::OkStatus();
}

// One token drawn from a row of the model's vocabulary of logits, N(0, 2):
// flatter than a trained model's, so the walks go deeper than they usually
// would. `sample.greedy` is the bound (one pass over the row).
void SamplerBenchmarks(const TextConfig& t, const MicroOptions& o, std::mt19937_64& rng,
                       std::vector<MicroResult>* out) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(std::max(1, t.vocab_size));
  for (float& x : logits) x = normal(rng);
  struct Case {
    const char* name;
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Case& c :
       {Case{"greedy", 0.0f, 0, 1.0f}, Case{"t1", 1.0f, 0, 1.0f},
        Case{"t0.7.top_p0.9", 0.7f, 0, 0.9f}, Case{"t0.7.top_k50", 0.7f, 50, 1.0f}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    Sampler sampler(p);
    out->push_back(TimeCalls(absl::StrCat("sample.", c.name, ".vocab", logits.size()),
                             o.min_seconds,
                             [&] { return static_cast<double>(sampler.Sample(logits)); }));
  }
}

}  // namespace

absl::StatusOr<std::vector<MicroResult>> RunMicroBenchmarks(const MicroOptions& o) {
  VISMOE_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::Load(o.model_path));
  const TextConfig& t = config.text;
  std::vector<int> moe_layers;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    if (t.IsMoeLayer(l)) moe_layers.push_back(l);
  }
  if (moe_layers.empty() || t.num_experts <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.model_path, "/config.json: no MoE layers to benchmark predictors on"));
  }
  const int count = o.prefetch_count > 0 ? o.prefetch_count : t.num_experts_per_tok;
  std::mt19937_64 rng(0);
  std::vector<MicroResult> out;
  VISMOE_RETURN_IF_ERROR(CompressorBenchmarks(t, o, rng, &out));
  SamplerBenchmarks(t, o, rng, &out);

  // history: one decode step of one MoE layer = Observe(top-k) + Predict(next layer, B).
  HistoryPredictor history(t.num_hidden_layers, t.num_experts, 0.8);
  std::vector<int> ids(t.num_experts);
  for (int e = 0; e < t.num_experts; ++e) ids[e] = e;
  size_t step = 0;
  out.push_back(TimeCalls("predict.history.observe_predict", o.min_seconds, [&] {
    const int layer = moe_layers[step % moe_layers.size()];
    const int next = moe_layers[(step + 1) % moe_layers.size()];
    ++step;
    std::shuffle(ids.begin(), ids.end(), rng);
    history.Observe(layer, absl::MakeConstSpan(ids).subspan(0, t.num_experts_per_tok));
    return static_cast<double>(history.Predict(next, count).size());
  }));

  // router-lookahead on the checkpoint's routers: OnPostAttention of one
  // layer's rows + Predict of the next MoE layer.
  std::unique_ptr<Checkpoint> ckpt;
  if (o.synthetic_weights) {
    VISMOE_ASSIGN_OR_RETURN(
        ckpt, SynthesizeCheckpoint(config, o.synthetic_seed, nullptr, "synthetic:" + o.model_path));
  } else {
    VISMOE_ASSIGN_OR_RETURN(ckpt, Checkpoint::Open(o.model_path));
  }
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<RouterLookaheadPredictor> router,
                          RouterLookaheadPredictor::Create(config, *ckpt, o.lookahead_window, {}));
  for (const auto& [phase, rows] :
       {std::pair{Phase::kDecode, int64_t{1}}, std::pair{Phase::kPrefill, int64_t{1024}}}) {
    const std::vector<float> residual =
        RandomVector(rng, static_cast<size_t>(rows) * t.hidden_size, -1.0f, 1.0f);
    router->BeginRequest();
    step = 0;
    out.push_back(
        TimeCalls(absl::StrCat("predict.router-lookahead.", PhaseName(phase), ".rows", rows),
                  o.min_seconds, [&] {
                    const int layer = moe_layers[step % moe_layers.size()];
                    const int next = moe_layers[(step + 1) % moe_layers.size()];
                    ++step;
                    router->OnPostAttention(phase, layer, residual.data(), rows);
                    return static_cast<double>(router->Predict(next, count).size());
                  }));
  }

  // mlp-lookahead: Eq. 6-8 forward of one feature vector.
  const MlpTrainOptions train;
  const int width = LookaheadFeatureWidth(t.num_experts, t.hidden_size, config.has_vision);
  const MlpLookahead mlp = RandomMlp(rng, width, train.hidden1, train.hidden2, t.num_experts);
  const std::vector<float> x = RandomVector(rng, width, -1.0f, 1.0f);
  out.push_back(TimeCalls("predict.mlp-lookahead.forward", o.min_seconds, [&] {
    const std::vector<float> y = mlp.Predict(x);
    return static_cast<double>(y[0]);
  }));
  return out;
}

nlohmann::json MicroJson(const std::vector<MicroResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const MicroResult& r : results) {
    out.push_back({{"name", r.name},
                   {"calls", r.calls},
                   {"mean_us", r.mean_us},
                   {"p50_us", r.p50_us},
                   {"p99_us", r.p99_us}});
  }
  return out;
}

}  // namespace vismoe::bench
