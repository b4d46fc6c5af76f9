#include "engine/calibrate/routing_stats.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <set>
#include <unordered_map>

namespace vismoe {
namespace {

struct Sums {
  double repeat = 0;
  int64_t repeat_tokens = 0;
  std::vector<int64_t> distances;  // finite reuse distances
  int64_t selections = 0;
  int64_t first_uses = 0;
  double distinct = 0;
  int64_t windows = 0;
};

void AddRepeatAndReuse(const LayerSequence& seq, int num_experts, int window, Sums* s) {
  std::vector<int64_t> last(num_experts, -1);
  for (size_t t = 0; t < seq.size(); ++t) {
    for (int e : seq[t]) {
      ++s->selections;
      if (last[e] < 0) {
        ++s->first_uses;
      } else {
        s->distances.push_back(static_cast<int64_t>(t) - last[e]);
      }
    }
    if (t > 0) {
      int common = 0;
      for (int e : seq[t]) common += std::count(seq[t - 1].begin(), seq[t - 1].end(), e) > 0;
      s->repeat += static_cast<double>(common) / std::max<size_t>(seq[t].size(), 1);
      ++s->repeat_tokens;
    }
    for (int e : seq[t]) last[e] = static_cast<int64_t>(t);
  }
  for (size_t w = 0; w + window <= seq.size(); w += window) {
    std::vector<char> seen(num_experts, 0);
    int distinct = 0;
    for (size_t t = w; t < w + window; ++t) {
      for (int e : seq[t]) distinct += !seen[e], seen[e] = 1;
    }
    s->distinct += distinct;
    ++s->windows;
  }
}

struct HitCount {
  int64_t hits = 0, queries = 0, warm_hits = 0, warm_queries = 0;
};

// LRU over one sequence: a token's experts are all looked up, then all
// inserted (a token needs its k experts at once).
void Lru(const LayerSequence& seq, int64_t capacity, int warmup, HitCount* c) {
  std::list<int> order;  // most recent first
  std::unordered_map<int, std::list<int>::iterator> where;
  for (size_t t = 0; t < seq.size(); ++t) {
    const bool warm = static_cast<int>(t) < warmup;
    for (int e : seq[t]) {
      auto it = where.find(e);
      const bool hit = it != where.end();
      (warm ? c->warm_hits : c->hits) += hit;
      ++(warm ? c->warm_queries : c->queries);
      if (hit) order.erase(it->second);
      order.push_front(e);
      where[e] = order.begin();
    }
    while (static_cast<int64_t>(order.size()) > std::max<int64_t>(capacity, 1)) {
      where.erase(order.back());
      order.pop_back();
    }
  }
}

// Belady: on overflow evict the cached expert whose next use is furthest
// (never = infinitely far); the token's own experts are never the victims.
void Belady(const LayerSequence& seq, int64_t capacity, int num_experts, int warmup, HitCount* c) {
  // next_use[t][j]: the next token after t that selects seq[t][j].
  std::vector<int64_t> next_of(num_experts, INT64_MAX);
  std::vector<std::vector<int64_t>> next_use(seq.size());
  for (size_t t = seq.size(); t-- > 0;) {
    next_use[t].resize(seq[t].size());
    for (size_t j = 0; j < seq[t].size(); ++j) next_use[t][j] = next_of[seq[t][j]];
    for (int e : seq[t]) next_of[e] = static_cast<int64_t>(t);
  }
  std::unordered_map<int, int64_t> cached;  // expert -> its next use
  for (size_t t = 0; t < seq.size(); ++t) {
    const bool warm = static_cast<int>(t) < warmup;
    for (size_t j = 0; j < seq[t].size(); ++j) {
      const int e = seq[t][j];
      const bool hit = cached.count(e) > 0;
      (warm ? c->warm_hits : c->hits) += hit;
      ++(warm ? c->warm_queries : c->queries);
      cached[e] = next_use[t][j];
    }
    while (static_cast<int64_t>(cached.size()) > std::max<int64_t>(capacity, 1)) {
      auto victim = cached.end();
      for (auto it = cached.begin(); it != cached.end(); ++it) {
        const bool own = std::count(seq[t].begin(), seq[t].end(), it->first) > 0;
        if (own) continue;
        if (victim == cached.end() || it->second > victim->second ||
            (it->second == victim->second && it->first < victim->first)) {
          victim = it;
        }
      }
      if (victim == cached.end()) break;  // capacity below top_k: keep the token's own
      cached.erase(victim);
    }
  }
}

// One request's lookups in execution order: per token, each layer's experts
// as keys layer * E + e. Tokens past a layer's sequence end are skipped.
std::vector<std::vector<int64_t>> Interleave(const std::vector<const LayerSequence*>& layers,
                                             int num_experts) {
  size_t tokens = 0;
  for (const LayerSequence* l : layers) tokens = std::max(tokens, l != nullptr ? l->size() : 0);
  std::vector<std::vector<int64_t>> out(tokens);
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t l = 0; l < layers.size(); ++l) {
      if (layers[l] == nullptr || t >= layers[l]->size()) continue;
      for (int e : (*layers[l])[t]) out[t].push_back(static_cast<int64_t>(l) * num_experts + e);
    }
  }
  return out;
}

// LRU and Belady over keyed lookups grouped by token (a token's lookups come
// from all layers: each key is inserted as it is looked up, and evictions
// spare only the key just inserted).
void SharedCaches(const std::vector<std::vector<int64_t>>& tokens, int64_t capacity, int warmup,
                  HitCount* lru, HitCount* belady) {
  capacity = std::max<int64_t>(capacity, 1);
  std::list<int64_t> order;
  std::unordered_map<int64_t, std::list<int64_t>::iterator> where;
  // Belady: next use of each lookup, then a set ordered by next use.
  std::vector<int64_t> flat;
  std::vector<int> token_of;
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int64_t k : tokens[t]) flat.push_back(k), token_of.push_back(static_cast<int>(t));
  }
  std::vector<int64_t> next(flat.size());
  std::unordered_map<int64_t, int64_t> seen;
  for (size_t i = flat.size(); i-- > 0;) {
    auto it = seen.find(flat[i]);
    next[i] = it == seen.end() ? INT64_MAX : it->second;
    seen[flat[i]] = static_cast<int64_t>(i);
  }
  std::set<std::pair<int64_t, int64_t>> by_next;  // (next use, key)
  std::unordered_map<int64_t, int64_t> cached;    // key -> its next use
  for (size_t i = 0; i < flat.size(); ++i) {
    const int64_t k = flat[i];
    const bool warm = token_of[i] < warmup;
    auto it = where.find(k);
    const bool lru_hit = it != where.end();
    (warm ? lru->warm_hits : lru->hits) += lru_hit;
    ++(warm ? lru->warm_queries : lru->queries);
    if (lru_hit) order.erase(it->second);
    order.push_front(k);
    where[k] = order.begin();
    if (static_cast<int64_t>(order.size()) > capacity) {
      where.erase(order.back());
      order.pop_back();
    }
    auto c = cached.find(k);
    const bool bel_hit = c != cached.end();
    (warm ? belady->warm_hits : belady->hits) += bel_hit;
    ++(warm ? belady->warm_queries : belady->queries);
    if (bel_hit) by_next.erase({c->second, k});
    cached[k] = next[i];
    by_next.insert({next[i], k});
    if (static_cast<int64_t>(cached.size()) > capacity) {
      auto victim = std::prev(by_next.end());
      if (victim->second == k) victim = std::prev(victim);
      cached.erase(victim->second);
      by_next.erase(victim);
    }
  }
}

double Share(int64_t num, int64_t den) { return den > 0 ? static_cast<double>(num) / den : 0.0; }

}  // namespace

void RoutingStatsRecorder::OnRouting(Phase phase, int layer, const float* /*hidden*/,
                                     const RouterResult& routing) {
  std::vector<LayerSequence>& by_layer = phase == Phase::kDecode ? decode_ : prefill_;
  if (layer < 0) return;
  if (static_cast<size_t>(layer) >= by_layer.size()) by_layer.resize(layer + 1);
  for (int64_t t = 0; t < routing.n; ++t) {
    const auto* row = routing.experts.data() + t * routing.top_k;
    by_layer[layer].emplace_back(row, row + routing.top_k);
  }
}

namespace {

// Shares of each token's ids at one layer found again at the next, summed over
// consecutive MoE layers with the same token count (token compression drops
// rows from later layers: those pairs do not line up).
void AddLayerAgreement(const std::vector<const LayerSequence*>& layers, double* agree,
                       double* selections, int64_t* top_k) {
  const LayerSequence* prev = nullptr;
  for (const LayerSequence* cur : layers) {
    if (cur == nullptr || cur->empty()) continue;
    if (prev != nullptr && prev->size() == cur->size()) {
      for (size_t t = 0; t < cur->size(); ++t) {
        const std::vector<int>& a = (*prev)[t];
        for (int e : a) {
          *agree += std::find((*cur)[t].begin(), (*cur)[t].end(), e) != (*cur)[t].end();
        }
        *selections += static_cast<double>(a.size());
        *top_k = static_cast<int64_t>(a.size());
      }
    }
    prev = cur;
  }
}

}  // namespace

RoutingStats ComputeRoutingStats(const std::vector<const LayerSequence*>& sequences,
                                 const RoutingStatsOptions& o,
                                 const std::vector<std::vector<const LayerSequence*>>& requests) {
  RoutingStats out;
  Sums sums;
  std::vector<HitCount> lru(o.cache_fractions.size()), belady(o.cache_fractions.size());
  for (const LayerSequence* seq : sequences) {
    if (seq == nullptr || seq->size() < 2) continue;
    ++out.sequences;
    out.tokens += static_cast<int64_t>(seq->size());
    AddRepeatAndReuse(*seq, o.num_experts, o.spread_window, &sums);
    for (size_t i = 0; i < o.cache_fractions.size(); ++i) {
      const auto capacity = static_cast<int64_t>(std::lround(o.cache_fractions[i] * o.num_experts));
      Lru(*seq, capacity, o.warmup_tokens, &lru[i]);
      Belady(*seq, capacity, o.num_experts, o.warmup_tokens, &belady[i]);
    }
  }
  std::vector<HitCount> shared_lru(o.cache_fractions.size()),
      shared_belady(o.cache_fractions.size());
  double agree = 0, agree_selections = 0;
  int64_t top_k = 0;
  for (const auto& layers : requests) {
    AddLayerAgreement(layers, &agree, &agree_selections, &top_k);
    const std::vector<std::vector<int64_t>> tokens = Interleave(layers, o.num_experts);
    int64_t moe_layers = 0;
    for (const LayerSequence* l : layers) moe_layers += l != nullptr && !l->empty();
    for (size_t i = 0; i < o.cache_fractions.size(); ++i) {
      const auto capacity = static_cast<int64_t>(
          std::lround(o.cache_fractions[i] * static_cast<double>(moe_layers * o.num_experts)));
      SharedCaches(tokens, capacity, o.warmup_tokens, &shared_lru[i], &shared_belady[i]);
    }
  }
  out.next_token_repeat = sums.repeat_tokens > 0 ? sums.repeat / sums.repeat_tokens : 0;
  std::vector<int64_t>& d = sums.distances;
  if (!d.empty()) {
    std::sort(d.begin(), d.end());
    out.reuse_median = static_cast<double>(d[d.size() / 2]);
    out.reuse_within_1 = Share(std::upper_bound(d.begin(), d.end(), 1) - d.begin(), d.size());
    out.reuse_within_8 = Share(std::upper_bound(d.begin(), d.end(), 8) - d.begin(), d.size());
  }
  out.first_use_share = Share(sums.first_uses, sums.selections);
  out.distinct_per_window = sums.windows > 0 ? sums.distinct / sums.windows : 0;
  out.next_layer_agreement = agree_selections > 0 ? agree / agree_selections : 0;
  out.next_layer_agreement_chance =
      agree_selections > 0 ? static_cast<double>(top_k) / o.num_experts : 0;
  for (size_t i = 0; i < o.cache_fractions.size(); ++i) {
    CacheHits c;
    c.fraction = o.cache_fractions[i];
    c.capacity = std::lround(o.cache_fractions[i] * o.num_experts);
    c.lru_hit = Share(lru[i].hits, lru[i].queries);
    c.lru_warmup_hit = Share(lru[i].warm_hits, lru[i].warm_queries);
    c.belady_hit = Share(belady[i].hits, belady[i].queries);
    c.shared_lru_hit = Share(shared_lru[i].hits, shared_lru[i].queries);
    c.shared_belady_hit = Share(shared_belady[i].hits, shared_belady[i].queries);
    out.cache.push_back(c);
  }
  return out;
}

nlohmann::json RoutingStatsJson(const RoutingStats& s) {
  nlohmann::json cache = nlohmann::json::array();
  for (const CacheHits& c : s.cache) {
    cache.push_back({{"fraction", c.fraction},
                     {"capacity", c.capacity},
                     {"lru_hit", c.lru_hit},
                     {"lru_warmup_hit", c.lru_warmup_hit},
                     {"belady_hit", c.belady_hit},
                     {"shared_lru_hit", c.shared_lru_hit},
                     {"shared_belady_hit", c.shared_belady_hit}});
  }
  return {{"sequences", s.sequences},
          {"tokens", s.tokens},
          {"next_token_repeat", s.next_token_repeat},
          {"reuse_median", s.reuse_median},
          {"reuse_within_1", s.reuse_within_1},
          {"reuse_within_8", s.reuse_within_8},
          {"first_use_share", s.first_use_share},
          {"distinct_per_window", s.distinct_per_window},
          {"next_layer_agreement", s.next_layer_agreement},
          {"next_layer_agreement_chance", s.next_layer_agreement_chance},
          {"cache", cache}};
}

}  // namespace vismoe
