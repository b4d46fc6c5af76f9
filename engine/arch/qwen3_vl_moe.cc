#include "engine/arch/qwen3_vl_moe.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "engine/backends/cpu/cpu_decoder_ops.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_spec.h"

namespace vismoe {

absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Qwen3VlMoeModel::Create(
    const ModelConfig& config, std::unique_ptr<DecoderOps> ops) {
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  if (ops == nullptr) return absl::InvalidArgumentError("Qwen3VlMoeModel: no backend ops");
  return std::unique_ptr<Qwen3VlMoeModel>(
      new Qwen3VlMoeModel(config, std::move(ops), spec.renormalize_topk));
}

Qwen3VlMoeModel::Qwen3VlMoeModel(const ModelConfig& config, std::unique_ptr<DecoderOps> ops,
                                 bool renormalize_topk)
    : config_(config), ops_(std::move(ops)), renormalize_topk_(renormalize_topk) {
  for (int l = 0; l < config_.text.num_hidden_layers && first_moe_layer_ < 0; ++l) {
    if (config_.text.IsMoeLayer(l)) first_moe_layer_ = l;
  }
  next_moe_layer_.assign(config_.text.num_hidden_layers, -1);
  for (int l = config_.text.num_hidden_layers - 2; l >= 0; --l) {
    next_moe_layer_[l] = config_.text.IsMoeLayer(l + 1) ? l + 1 : next_moe_layer_[l + 1];
  }
}

absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Qwen3VlMoeModel::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, ThreadPool* pool) {
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<cpu::CpuDecoderOps> ops,
                          cpu::CpuDecoderOps::Create(config, checkpoint, pool));
  return Create(config, std::move(ops));
}

std::string Qwen3VlMoeModel::TextPrefix(const ModelConfig& config) {
  absl::StatusOr<ArchSpec> spec = ArchSpec::For(config);
  return spec.ok() ? spec->text_prefix : "model.";
}

ExpertNaming Qwen3VlMoeModel::Experts(const ModelConfig& config) {
  absl::StatusOr<ArchSpec> spec = ArchSpec::For(config);
  return spec.ok() ? spec->experts : ExpertNaming("model.");
}

std::unique_ptr<KvCache> Qwen3VlMoeModel::NewKvCache(int64_t capacity) const {
  absl::StatusOr<std::unique_ptr<KvCache>> cache = ops_->CreateKvCache(capacity);
  return cache.ok() ? std::move(*cache) : nullptr;
}

absl::StatusOr<Qwen3VlMoeModel::StepState> Qwen3VlMoeModel::Plan(const DecoderInput& input,
                                                                 const KvCache& cache) const {
  const TextConfig& c = config_.text;
  StepState s;
  s.n = static_cast<int64_t>(input.tokens.size());
  const int64_t n = s.n;
  if (n == 0) return absl::InvalidArgumentError("Forward: no tokens");
  VISMOE_RETURN_IF_ERROR(cache.CheckRoom(n));
  s.positions = input.positions;
  if (s.positions.empty()) {
    s.positions.resize(3 * n);
    for (int a = 0; a < 3; ++a) {
      for (int64_t i = 0; i < n; ++i) s.positions[a * n + i] = cache.length() + i;
    }
  } else if (static_cast<int64_t>(s.positions.size()) != 3 * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: positions has ", s.positions.size(), " entries, expected 3 * ", n));
  }
  for (int64_t t = 0; t < n; ++t) {
    const int id = input.tokens[t];
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: token id ", id, " outside the vocabulary [0, ", c.vocab_size, ")"));
    }
    if (input.visual_embeds != nullptr && id == config_.image_token_id) s.visual_rows.push_back(t);
  }
  if (input.visual_embeds != nullptr &&
      static_cast<int64_t>(s.visual_rows.size()) != input.num_visual) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", s.visual_rows.size(),
                                                   " image tokens but ", input.num_visual,
                                                   " visual embeddings"));
  }
  if (static_cast<int64_t>(input.deepstack.size()) > c.num_hidden_layers) {
    return absl::InvalidArgumentError("Forward: more DeepStack features than decoder layers");
  }
  s.n_in = n;
  return s;
}

struct Qwen3VlMoeModel::Batch {
  absl::Span<const DecoderBatchEntry> entries;
  std::vector<StepState> seqs;  // one per entry
  Phase phase = Phase::kPrefill;
  bool observed = false;  // some entry has an observer
  // What BeginStep sees: the entries' rows concatenated.
  std::vector<int> tokens;
  std::vector<StepSequence> sequences;
  const float* visual_embeds = nullptr;
  std::vector<float> visual;  // the concatenated visual rows, when several entries have them
  std::vector<const float*> deepstack;
  std::vector<std::vector<float>> deepstack_rows;  // likewise, per DeepStack layer
  // MoE layers run with DeviceMoe whose routing the host has not seen yet,
  // in the order they ran.
  std::deque<int> deferred;
  // The rows in flight, rebuilt from `seqs` by Gather().
  int64_t n = 0;
  std::vector<int64_t> positions;    // [3][n]
  std::vector<int64_t> visual_rows;  // step row of each visual token, -1 once dropped

  void Gather() {
    n = 0;
    for (const StepState& s : seqs) n += s.n;
    positions.assign(3 * n, 0);
    visual_rows.clear();
    int64_t off = 0;
    for (const StepState& s : seqs) {
      for (int a = 0; a < 3; ++a) {
        std::copy_n(s.positions.begin() + a * s.n, s.n, positions.begin() + a * n + off);
      }
      for (int64_t r : s.visual_rows) visual_rows.push_back(r < 0 ? -1 : off + r);
      off += s.n;
    }
  }
};

namespace {

// Rows [first, first + n) of a routing result.
RouterResult SliceRouting(const RouterResult& r, int64_t first, int64_t n) {
  RouterResult out;
  out.n = n;
  out.num_experts = r.num_experts;
  out.top_k = r.top_k;
  auto rows = [first, n](const auto& v, int64_t width) {
    using V = std::decay_t<decltype(v)>;
    if (v.empty()) return V();
    return V(v.begin() + first * width, v.begin() + (first + n) * width);
  };
  out.logits = rows(r.logits, r.num_experts);
  out.experts = rows(r.experts, r.top_k);
  out.weights = rows(r.weights, r.top_k);
  out.skipped = rows(r.skipped, r.top_k);
  out.committed = rows(r.committed, r.top_k);
  out.speculative = rows(r.speculative, r.top_k);
  return out;
}

// Checks `kept` (rows of a sequence of n rows to keep): non-empty, strictly
// ascending, in range.
absl::Status CheckKept(const std::vector<int64_t>& kept, int64_t n) {
  if (kept.empty()) return absl::InvalidArgumentError("Forward: token compression kept no rows");
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i] < 0 || kept[i] >= n || (i > 0 && kept[i] <= kept[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: kept row ", kept[i], " at index ", i,
                                                     " is out of [0, ", n,
                                                     ") or not strictly ascending"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Qwen3VlMoeModel::PlanBatch(absl::Span<const DecoderBatchEntry> entries,
                                        Batch& b) const {
  if (entries.empty()) return absl::InvalidArgumentError("Forward: no sequences");
  int64_t total = 0;
  for (const DecoderBatchEntry& e : entries) {
    if (e.input == nullptr || e.cache == nullptr || e.logits == nullptr) {
      return absl::InvalidArgumentError("Forward: a batch entry lacks its input, cache or logits");
    }
    total += static_cast<int64_t>(e.input->tokens.size());
  }
  VISMOE_RETURN_IF_ERROR(ops_->CheckStepSize(total));
  b.entries = entries;
  b.phase = entries[0].input->phase;
  std::vector<const DecoderBatchEntry*> visual;  // entries with visual rows
  for (size_t i = 0; i < entries.size(); ++i) {
    const DecoderBatchEntry& e = entries[i];
    absl::StatusOr<StepState> planned = Plan(*e.input, *e.cache);
    if (!planned.ok()) return EntryError(i, planned.status());
    StepState s = *std::move(planned);
    if (e.input->phase != b.phase) b.phase = Phase::kPrefill;
    b.observed = b.observed || e.input->observer != nullptr;
    b.tokens.insert(b.tokens.end(), e.input->tokens.begin(), e.input->tokens.end());
    b.sequences.push_back({e.cache, s.n, e.input->rope_length});
    if (!s.visual_rows.empty()) visual.push_back(&e);
    b.seqs.push_back(std::move(s));
  }
  if (visual.size() == 1) {  // no copy: the one entry's rows as they are
    b.visual_embeds = visual[0]->input->visual_embeds;
    b.deepstack = visual[0]->input->deepstack;
  } else if (visual.size() > 1) {
    const int64_t h = config_.text.hidden_size;
    size_t layers = 0;
    for (const DecoderBatchEntry* e : visual) layers = std::max(layers, e->input->deepstack.size());
    b.deepstack_rows.resize(layers);
    for (const DecoderBatchEntry* e : visual) {
      const DecoderInput& in = *e->input;
      b.visual.insert(b.visual.end(), in.visual_embeds, in.visual_embeds + in.num_visual * h);
      for (size_t k = 0; k < layers; ++k) {
        // A missing feature adds zeros: the entry alone would add nothing.
        const float* f = k < in.deepstack.size() ? in.deepstack[k] : nullptr;
        std::vector<float>& rows = b.deepstack_rows[k];
        if (f != nullptr) {
          rows.insert(rows.end(), f, f + in.num_visual * h);
        } else {
          rows.resize(rows.size() + in.num_visual * h, 0.0f);
        }
      }
    }
    b.visual_embeds = b.visual.data();
    for (size_t k = 0; k < layers; ++k) {
      bool any = false;
      for (const DecoderBatchEntry* e : visual) {
        any = any || (k < e->input->deepstack.size() && e->input->deepstack[k] != nullptr);
      }
      b.deepstack.push_back(any ? b.deepstack_rows[k].data() : nullptr);
    }
  }
  b.Gather();
  // Every entry is valid: take the blocks of the new rows (none when the
  // scheduler reserved them already).
  for (size_t i = 0; i < entries.size(); ++i) {
    KvCache* cache = entries[i].cache;
    if (absl::Status st = cache->Reserve(cache->length() + b.seqs[i].n); !st.ok()) {
      return EntryError(i, st);
    }
  }
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeModel::Compress(int layer, Batch& b, DecoderStep& step,
                                       ExpertProvider* experts) const {
  bool compresses = false;
  for (const DecoderBatchEntry& e : b.entries) {
    compresses =
        compresses || (e.input->select_kept_rows && e.input->compress_before_layer == layer);
  }
  if (!compresses) return absl::OkStatus();
  // The compressor chooses from what the observers saw of the layers before.
  VISMOE_RETURN_IF_ERROR(DrainDeferred(b, step, experts, /*wait=*/true));
  std::vector<int64_t> kept;  // step rows
  bool any = false;
  int64_t off = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& input = *b.entries[i].input;
    StepState& s = b.seqs[i];
    const int64_t old_n = s.n;
    if (input.select_kept_rows && input.compress_before_layer == layer) {
      const absl::StatusOr<std::vector<int64_t>> selected = input.select_kept_rows();
      const absl::Status valid = selected.ok() ? CheckKept(*selected, old_n) : selected.status();
      if (!valid.ok()) return EntryError(i, valid);  // this sequence's, not the step's
      const std::vector<int64_t>& local = *selected;
      const int64_t m = static_cast<int64_t>(local.size());
      std::vector<int64_t> new_row(old_n, -1);
      std::vector<int64_t> positions(3 * m);
      for (int64_t j = 0; j < m; ++j) {
        new_row[local[j]] = j;
        for (int a = 0; a < 3; ++a) positions[a * m + j] = s.positions[a * old_n + local[j]];
        kept.push_back(off + local[j]);
      }
      for (int64_t& r : s.visual_rows) r = r < 0 ? -1 : new_row[r];
      s.positions = std::move(positions);
      s.n = m;
      s.compressed = true;
      any = true;
    } else {
      for (int64_t r = 0; r < old_n; ++r) kept.push_back(off + r);
    }
    off += old_n;
  }
  if (!any) return absl::OkStatus();
  b.Gather();
  return step.KeepRows(kept, b.positions, b.visual_rows);
}

absl::Status Qwen3VlMoeModel::Moe(int layer, Batch& b, DecoderStep& step,
                                  ExpertProvider* experts) const {
  RouterResult routing;
  bool skipping = false;    // some entry skips experts: the rule needs the weights
  bool committing = false;  // some entry commits: the rule needs logits and weights
  for (const DecoderBatchEntry& e : b.entries) {
    skipping = skipping || e.input->expert_skipping != nullptr;
    committing = committing || CommitsAt(*e.input, layer);
  }
  VISMOE_RETURN_IF_ERROR(step.Route(layer, b.observed || skipping || committing, &routing));
  for (int id : routing.experts) {
    if (id < 0 || id >= config_.text.num_experts) {
      return absl::InternalError(absl::StrCat("router returned expert ", id, " at layer ", layer));
    }
  }
  if (skipping) SkipExperts(layer, b, &routing);
  if (b.observed) {
    VISMOE_ASSIGN_OR_RETURN(const float* hidden, step.HostRows(StepRows::kNormed));
    ObserveRouting(layer, b, hidden, routing);
  }
  // After the observers: predictors learn from the router's own choice.
  if (committing) Commit(layer, b, experts, &routing);
  // Speculative execution: outputs computed ahead for this layer enter where
  // the final routing agrees; this layer's copy waits compute the next's.
  const SpeculationRecord* ahead = step.Speculation(layer);
  if (ahead != nullptr) MatchSpeculation(*ahead, b, &routing);
  VISMOE_RETURN_IF_ERROR(ArmSpeculation(layer, b, step));
  VISMOE_RETURN_IF_ERROR(step.Experts(layer, b.phase, routing, experts));
  if (ahead != nullptr) AccountSpeculation(*ahead, b, routing);
  if (b.observed) {
    VISMOE_ASSIGN_OR_RETURN(const float* out, step.HostRows(StepRows::kMoeOutput));
    ObserveRows(layer, b, out, &RouterObserver::OnMoeOutput);
  }
  return step.AddMoeOutput();
}

void Qwen3VlMoeModel::ObserveRows(int layer, const Batch& b, const float* rows,
                                  void (RouterObserver::*hook)(Phase, int, const float*,
                                                               int64_t)) const {
  const int64_t h = config_.text.hidden_size;
  int64_t off = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& in = *b.entries[i].input;
    if (in.observer != nullptr) (in.observer->*hook)(in.phase, layer, rows + off * h, b.seqs[i].n);
    off += b.seqs[i].n;
  }
}

void Qwen3VlMoeModel::ObserveRouting(int layer, const Batch& b, const float* hidden,
                                     const RouterResult& routing) const {
  const int64_t h = config_.text.hidden_size;
  const bool one = b.entries.size() == 1;
  int64_t off = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& in = *b.entries[i].input;
    const int64_t n = b.seqs[i].n;
    if (in.observer != nullptr) {
      in.observer->OnRouting(in.phase, layer, hidden + off * h,
                             one ? routing : SliceRouting(routing, off, n));
    }
    off += n;
  }
}

bool Qwen3VlMoeModel::DeviceMoeAt(int layer, const Batch& b, DecoderStep& step,
                                  ExpertProvider* experts) const {
  for (const DecoderBatchEntry& e : b.entries) {
    // Skipping changes what is computed; speculation needs the layer's copy
    // waits. Commit never acts on a pinned layer (every expert is there).
    if (e.input->expert_skipping != nullptr || e.input->speculative != nullptr) return false;
  }
  return step.PrepareDeviceMoe(layer, experts);
}

absl::Status Qwen3VlMoeModel::DrainDeferred(Batch& b, DecoderStep& step, ExpertProvider* experts,
                                            bool wait) const {
  while (!b.deferred.empty()) {
    const int layer = b.deferred.front();
    if (!wait) {
      VISMOE_ASSIGN_OR_RETURN(const bool ready, step.DeferredReady(layer));
      if (!ready) return absl::OkStatus();
    }
    VISMOE_ASSIGN_OR_RETURN(const DeferredLayer d, step.TakeDeferred(layer));
    b.deferred.pop_front();
    VISMOE_RETURN_IF_ERROR(SeeDeferred(layer, b, d, experts));
  }
  return absl::OkStatus();
}

// What Layer and Moe would have told the observers and the provider, in the
// same order: post-attention rows, routing, the provider's lookups, output.
absl::Status Qwen3VlMoeModel::SeeDeferred(int layer, const Batch& b, const DeferredLayer& d,
                                          ExpertProvider* experts) const {
  const RouterResult& r = d.routing;
  if (r.n != b.n || static_cast<int64_t>(r.experts.size()) != b.n * r.top_k) {
    return absl::InternalError(
        absl::StrCat("layer ", layer, ": deferred routing of ", r.n, " rows for a step of ", b.n));
  }
  std::vector<char> used(config_.text.num_experts, 0);
  for (int id : r.experts) {
    if (id < 0 || id >= config_.text.num_experts) {
      return absl::InternalError(absl::StrCat("router returned expert ", id, " at layer ", layer));
    }
    used[id] = 1;
  }
  if (b.observed) {
    if (d.residual == nullptr || d.normed == nullptr || d.moe_out == nullptr) {
      return absl::InternalError(absl::StrCat("layer ", layer, ": deferred rows missing"));
    }
    ObserveRows(layer, b, d.residual, &RouterObserver::OnPostAttention);
    ObserveRouting(layer, b, d.normed, r);
  }
  std::vector<int> active;
  for (int e = 0; e < config_.text.num_experts; ++e) {
    if (used[e]) active.push_back(e);
  }
  VISMOE_RETURN_IF_ERROR(experts->RecordPinnedLayer(b.phase, layer, active));
  if (b.observed) ObserveRows(layer, b, d.moe_out, &RouterObserver::OnMoeOutput);
  return absl::OkStatus();
}

void Qwen3VlMoeModel::SkipExperts(int layer, const Batch& b, RouterResult* routing) const {
  int64_t off = 0;
  std::vector<char> visual;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& in = *b.entries[i].input;
    const StepState& s = b.seqs[i];
    if (in.expert_skipping != nullptr) {
      visual.assign(static_cast<size_t>(s.n), 0);
      for (int64_t r : s.visual_rows) {
        if (r >= 0) visual[r] = 1;  // -1: compressed away
      }
      MarkSkippedExperts(*in.expert_skipping, layer, off, visual, routing, in.skip_counts);
    }
    off += s.n;
  }
}

bool Qwen3VlMoeModel::CommitsAt(const DecoderInput& in, int layer) const {
  return in.commit != nullptr && in.phase == Phase::kDecode &&
         !(in.first_decode_step && layer == first_moe_layer_);
}

void Qwen3VlMoeModel::Commit(int layer, const Batch& b, ExpertProvider* experts,
                             RouterResult* routing) const {
  const ExpertAvailability avail = experts->Availability(layer);
  if (avail.all) return;  // everything is there: nothing to commit to
  int64_t off = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& in = *b.entries[i].input;
    if (CommitsAt(in, layer)) {
      CommitMisses(*in.commit, renormalize_topk_, avail, off, b.seqs[i].n, routing,
                   in.commit_counts);
    }
    off += b.seqs[i].n;
  }
}

absl::Status Qwen3VlMoeModel::ArmSpeculation(int layer, const Batch& b, DecoderStep& step) const {
  const int target = next_moe_layer_[layer];
  if (target < 0) return absl::OkStatus();
  std::vector<int64_t> rows;
  const SpeculativeExecution* settings = nullptr;
  int64_t off = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& in = *b.entries[i].input;
    // Token compression may renumber the step's rows before the target.
    if (in.select_kept_rows && in.compress_before_layer > layer) return absl::OkStatus();
    if (in.speculative != nullptr && in.phase == Phase::kDecode) {
      if (settings == nullptr) settings = in.speculative;
      for (int64_t r = 0; r < b.seqs[i].n; ++r) rows.push_back(off + r);
    }
    off += b.seqs[i].n;
  }
  if (rows.empty()) return absl::OkStatus();
  SpeculationPlan plan;
  plan.from_layer = layer;
  plan.target_layer = target;
  plan.rows = rows;
  plan.default_vector = settings->DefaultVector(layer);
  return step.ArmSpeculation(plan);
}

void Qwen3VlMoeModel::MatchSpeculation(const SpeculationRecord& record, const Batch& b,
                                       RouterResult* routing) const {
  int64_t off = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& in = *b.entries[i].input;
    if (in.speculative != nullptr) {
      vismoe::MatchSpeculation(record, off, b.seqs[i].n, routing, in.speculative_counts);
    }
    off += b.seqs[i].n;
  }
}

void Qwen3VlMoeModel::AccountSpeculation(const SpeculationRecord& record, const Batch& b,
                                         const RouterResult& routing) const {
  int64_t off = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const DecoderInput& in = *b.entries[i].input;
    if (in.speculative != nullptr) {
      AccountSpeculationTime(record, routing, off, b.seqs[i].n, in.speculative_counts);
    }
    off += b.seqs[i].n;
  }
}

absl::Status Qwen3VlMoeModel::Layer(int layer, Batch& b, DecoderStep& step,
                                    ExpertProvider* experts) const {
  const bool moe = config_.text.IsMoeLayer(layer);
  // A pinned layer may run without the host; the host catches up later.
  const bool device_moe = moe && DeviceMoeAt(layer, b, step, experts);
  VISMOE_RETURN_IF_ERROR(step.Norm(layer, NormSite::kInput));
  VISMOE_RETURN_IF_ERROR(step.Attention(layer));  // hs += attention
  if (moe && !device_moe) {
    // Observers and the provider hear of the layers before this one first.
    VISMOE_RETURN_IF_ERROR(DrainDeferred(b, step, experts, /*wait=*/true));
    if (b.observed) {
      VISMOE_ASSIGN_OR_RETURN(const float* residual, step.HostRows(StepRows::kResidual));
      ObserveRows(layer, b, residual, &RouterObserver::OnPostAttention);
    }
  }
  VISMOE_RETURN_IF_ERROR(step.Norm(layer, NormSite::kPostAttention));
  if (device_moe) {
    VISMOE_RETURN_IF_ERROR(step.DeviceMoe(layer, b.phase, experts, b.observed));  // hs += MoE
    b.deferred.push_back(layer);
    // What has finished is seen now: prefetch for later layers starts early.
    VISMOE_RETURN_IF_ERROR(DrainDeferred(b, step, experts, /*wait=*/false));
  } else if (moe) {
    VISMOE_RETURN_IF_ERROR(Moe(layer, b, step, experts));  // hs += MoE
  } else {
    VISMOE_RETURN_IF_ERROR(step.DenseMlp(layer));  // hs += MLP
  }
  if (layer < static_cast<int>(b.deepstack.size()) && b.deepstack[layer] != nullptr) {
    VISMOE_RETURN_IF_ERROR(step.AddDeepStack(layer));
  }
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeModel::Logits(Batch& b, DecoderStep& step) const {
  bool all = false;
  bool drawn = true;  // every entry takes its token: no logits leave the device
  std::vector<TokenDraw> draws;
  for (const DecoderBatchEntry& e : b.entries) {
    all = all || e.input->all_logits;
    drawn = drawn && e.token != nullptr;
    draws.push_back(e.draw != nullptr ? *e.draw : TokenDraw{});
  }
  if (drawn && !all) {
    std::vector<int> tokens;
    VISMOE_RETURN_IF_ERROR(step.DrawTokens(draws, &tokens));
    if (tokens.size() != b.entries.size()) {
      return absl::InternalError(
          absl::StrCat(tokens.size(), " tokens for ", b.entries.size(), " sequences"));
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      *b.entries[i].token = tokens[i];
      b.entries[i].logits->clear();
    }
    return absl::OkStatus();
  }
  if (b.entries.size() == 1) return step.Logits(all, b.entries[0].logits);
  std::vector<float> logits;
  VISMOE_RETURN_IF_ERROR(step.Logits(all, &logits));
  const int64_t vocab = config_.text.vocab_size;
  int64_t row = 0;  // the entry's first row in `logits`
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const int64_t n = all ? b.seqs[i].n : 1;
    // Without all_logits an entry gets its last row only.
    const int64_t first = b.entries[i].input->all_logits ? row : row + n - 1;
    b.entries[i].logits->assign(logits.begin() + first * vocab, logits.begin() + (row + n) * vocab);
    row += n;
  }
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeModel::Forward(const DecoderInput& input, KvCache* cache,
                                      ExpertProvider* experts, std::vector<float>* logits) const {
  const DecoderBatchEntry entry{&input, cache, logits};
  return ForwardBatch(absl::MakeConstSpan(&entry, 1), experts);
}

absl::Status Qwen3VlMoeModel::ForwardBatch(absl::Span<const DecoderBatchEntry> batch,
                                           ExpertProvider* experts) const {
  Batch b;
  VISMOE_RETURN_IF_ERROR(PlanBatch(batch, b));
  StepInput in;
  in.tokens = b.tokens;
  in.positions = b.positions;
  in.visual_rows = b.visual_rows;
  in.visual_embeds = b.visual_embeds;
  in.deepstack = b.deepstack;
  in.sequences = b.sequences;
  VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<DecoderStep> step, ops_->BeginStep(in));
  // The step stops as soon as every entry wants to (between layers, or in a
  // wait for an expert's copy); while one entry still wants its answer, the
  // others are dropped between steps instead.
  const bool interruptible = std::all_of(
      batch.begin(), batch.end(),
      [](const DecoderBatchEntry& e) { return static_cast<bool>(e.input->is_cancelled); });
  auto all_cancelled = [batch] {
    return std::all_of(batch.begin(), batch.end(),
                       [](const DecoderBatchEntry& e) { return e.input->is_cancelled(); });
  };
  if (interruptible && experts != nullptr) experts->SetStepInterrupt(all_cancelled);
  const absl::Cleanup clear_interrupt = [&] {
    if (interruptible && experts != nullptr) experts->SetStepInterrupt(nullptr);
  };
  for (int l = 0; l < config_.text.num_hidden_layers; ++l) {
    if (interruptible && all_cancelled()) return absl::CancelledError("cancelled");
    VISMOE_RETURN_IF_ERROR(Compress(l, b, *step, experts));
    VISMOE_RETURN_IF_ERROR(Layer(l, b, *step, experts));
  }
  VISMOE_RETURN_IF_ERROR(DrainDeferred(b, *step, experts, /*wait=*/true));
  // A backend's asynchronous errors surface in Logits at the latest: the
  // caches advance only after it.
  VISMOE_RETURN_IF_ERROR(Logits(b, *step));
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepState& s = b.seqs[i];
    if (s.compressed) {
      batch[i].cache->Advance(s.n_in, batch[i].input->compress_before_layer, s.n);
    } else {
      batch[i].cache->Advance(s.n_in);
    }
  }
  return absl::OkStatus();
}

}  // namespace vismoe
