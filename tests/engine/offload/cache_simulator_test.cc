// Hit, miss and byte counts of the offload runtime on recorded routing traces
// (synthetic, and recorded from the tiny Qwen3-VL-MoE) equal those of a small
// independent cache simulator, for LRU, LFU and guarded-priority eviction.
#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/runtime/sampler.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/offload/fake_expert_source.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

struct Step {
  int layer;
  std::vector<int> experts;
};

// The simulator: a slot array; Required entries are untouchable; a miss takes
// the first empty slot, else the unprotected entry ranked lowest by the
// policy (then least recently used, then lowest slot). Experts are computed
// hits first, then misses, each released (unprotected) right after use.
struct Simulator {
  struct Entry {
    int layer = -1, expert = -1;
    bool required = false;
    uint64_t last = 0;
  };
  Simulator(int n, std::string p, std::map<std::pair<int, int>, double> prio)
      : slots(n), policy(std::move(p)), priority(std::move(prio)) {}

  int Find(int l, int e) const {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].layer == l && slots[i].expert == e) return static_cast<int>(i);
    }
    return -1;
  }
  double Key(const Entry& x) const {
    if (policy == "lfu") {
      auto it = uses.find({x.layer, x.expert});
      return it == uses.end() ? 0 : static_cast<double>(it->second);
    }
    if (policy == "guarded") {
      auto it = priority.find({x.layer, x.expert});
      return it == priority.end() ? 0 : it->second;
    }
    return 0;
  }
  int Victim() const {
    int best = -1;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].layer < 0) return static_cast<int>(i);
      if (slots[i].required) continue;
      if (best < 0 || std::make_pair(Key(slots[i]), slots[i].last) <
                          std::make_pair(Key(slots[best]), slots[best].last)) {
        best = static_cast<int>(i);
      }
    }
    return best;
  }
  void Use(int i) {
    slots[i].last = ++clock;
    ++uses[{slots[i].layer, slots[i].expert}];
  }
  void Fill(int layer, std::vector<int>* pending) {
    while (!pending->empty()) {
      const int v = Victim();
      if (v < 0) return;
      slots[v] = Entry{layer, pending->front(), true, 0};
      pending->erase(pending->begin());
      Use(v);
      ++copies;
    }
  }
  void Run(const Step& s) {
    queries += s.experts.size();
    std::vector<int> order, pending;
    for (int e : s.experts) {
      const int i = Find(s.layer, e);
      if (i < 0) {
        pending.push_back(e);
        continue;
      }
      ++hits;
      slots[i].required = true;
      Use(i);
      order.push_back(e);
    }
    order.insert(order.end(), pending.begin(), pending.end());
    Fill(s.layer, &pending);
    for (int e : order) {
      const int i = Find(s.layer, e);
      ASSERT_GE(i, 0) << "simulator stuck";
      slots[i].required = false;
      Fill(s.layer, &pending);
    }
    for (Entry& x : slots) {
      if (x.layer == s.layer) x.required = false;
    }
  }

  std::vector<Entry> slots;
  std::string policy;
  std::map<std::pair<int, int>, double> priority;
  std::map<std::pair<int, int>, uint64_t> uses;
  uint64_t clock = 0, queries = 0, hits = 0, copies = 0;
};

// Runs `trace` through the provider (pinned layers are skipped in both).
void Compare(ExpertProvider& source, const TextConfig& config, const MemoryPlan& plan,
             const std::vector<Step>& trace, const std::string& policy) {
  SCOPED_TRACE(policy + " with " + std::to_string(plan.num_slabs) + " slabs");
  std::map<std::pair<int, int>, double> prio;
  std::mt19937 rng(plan.num_slabs);
  for (int l : plan.offloaded_layer_ids) {
    for (int e = 0; e < config.num_experts; ++e) prio[{l, e}] = static_cast<double>(rng() % 7);
  }
  OffloadOptions o;
  o.eviction = policy;
  auto p = OffloadExpertProvider::Create(source, config, plan, o, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  for (const auto& [k, v] : prio) (*p)->SetExpertPriority(k.first, k.second, v);
  Simulator sim(plan.num_slabs, policy, prio);
  uint64_t pinned_queries = 0;
  for (const Step& s : trace) {
    const bool pinned = std::find(plan.pinned_layer_ids.begin(), plan.pinned_layer_ids.end(),
                                  s.layer) != plan.pinned_layer_ids.end();
    if (pinned) {
      pinned_queries += s.experts.size();
    } else {
      sim.Run(s);
    }
    auto order = (*p)->BeginLayer(Phase::kDecode, s.layer, s.experts);
    ASSERT_TRUE(order.ok()) << order.status();
    for (int e : *order) {
      ASSERT_TRUE((*p)->Acquire(s.layer, e).ok());
      (*p)->Release(s.layer, e);
    }
    (*p)->EndLayer(s.layer);
  }
  const OffloadStats st = (*p)->TakeRequestStats();
  EXPECT_EQ(st.cache_queries, sim.queries + pinned_queries);
  EXPECT_EQ(st.cache_hits, sim.hits + pinned_queries);
  EXPECT_EQ(st.prefetch_needed, sim.queries);
  EXPECT_EQ(st.prefetch_recalled, sim.hits);
  EXPECT_EQ(st.bytes_h2d, sim.copies * (*p)->format().bytes);
  EXPECT_EQ(sim.queries - sim.hits, sim.copies);
}

TEST(CacheSimulatorTest, SyntheticSkewedTrace) {
  constexpr int kLayers = 4, kExperts = 16, kTopK = 4;
  testing::FakeExpertSource src(kLayers, kExperts, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  std::mt19937 rng(7);
  std::vector<Step> trace;
  for (int step = 0; step < 40; ++step) {
    const int tokens = step == 0 ? 6 : 1;  // a prefill, then decode steps
    for (int l = 0; l < kLayers; ++l) {
      std::vector<int> set;
      for (int t = 0; t < tokens; ++t) {
        std::vector<int> pool;
        while (static_cast<int>(pool.size()) < kTopK) {
          // Skewed: low ids are far more likely, shifted per layer.
          const int e =
              (static_cast<int>(std::min<uint32_t>(rng() % 16, rng() % 16)) + 3 * l) % kExperts;
          if (std::find(pool.begin(), pool.end(), e) == pool.end()) pool.push_back(e);
        }
        for (int e : pool) {
          if (std::find(set.begin(), set.end(), e) == set.end()) set.push_back(e);
        }
      }
      trace.push_back({l, set});
    }
  }
  for (const char* policy : {"lru", "lfu", "guarded"}) {
    for (int pinned : {0, 1}) {
      for (int slabs : {1, 3, 8, 20}) {
        Compare(src, src.Config(kTopK), src.Plan(pinned, slabs), trace, policy);
      }
    }
  }
}

// Records the BeginLayer calls of a real forward pass.
class RecordingProvider final : public ExpertProvider {
 public:
  explicit RecordingProvider(ExpertProvider* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override {
    trace.push_back({layer, std::vector<int>(experts.begin(), experts.end())});
    return inner_->BeginLayer(phase, layer, experts);
  }
  absl::StatusOr<ExpertWeights> Acquire(int l, int e) override { return inner_->Acquire(l, e); }
  void Release(int l, int e) override { inner_->Release(l, e); }
  void EndLayer(int l) override { inner_->EndLayer(l); }
  std::vector<Step> trace;

 private:
  ExpertProvider* inner_;
};

TEST(CacheSimulatorTest, TraceRecordedFromTheTinyModel) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::string prefix = Qwen3VlMoeModel::TextPrefix(*config);
  auto resident = ResidentExpertProvider::Create(**ckpt, config->text, prefix);
  ASSERT_TRUE(resident.ok()) << resident.status();
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  RecordingProvider rec(resident->get());
  std::ifstream in(testing::FixturesDir() + "/golden/text_cases.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json cases = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  for (const auto& c : cases) {
    const std::vector<int> ids = c["input_ids"].get<std::vector<int>>();
    auto cache = (*model)->NewKvCache(static_cast<int64_t>(ids.size()) + 16);
    DecoderInput input;
    input.tokens = ids;
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(input, cache.get(), &rec, &logits).ok());
    for (int i = 0; i < 12; ++i) {
      const int tok = Sampler::Argmax(logits);
      DecoderInput step;
      step.tokens = absl::MakeConstSpan(&tok, 1);
      step.phase = Phase::kDecode;
      ASSERT_TRUE((*model)->Forward(step, cache.get(), &rec, &logits).ok());
    }
  }
  ASSERT_FALSE(rec.trace.empty());
  auto sizes = MeasureModelSizes(**ckpt, config->text, prefix);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  for (const char* policy : {"lru", "lfu", "guarded"}) {
    for (int slabs : {1, 5, 17, 40}) {
      MemoryPlanOptions o;
      o.pinned_layers = 1;
      o.budget_bytes =
          sizes->resident_bytes +
          (static_cast<int64_t>(config->text.num_experts) + slabs) * sizes->expert_bytes;
      auto plan = MakeMemoryPlan(*sizes, o);
      ASSERT_TRUE(plan.ok()) << plan.status();
      Compare(**resident, config->text, *plan, rec.trace, policy);
    }
  }
}

}  // namespace
}  // namespace vismoe
