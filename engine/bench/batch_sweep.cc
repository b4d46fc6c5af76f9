#include "engine/bench/batch_sweep.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/policy/sequence_preload.h"

namespace vismoe::bench {
namespace {

// The model, its experts and the provider the sweep runs against.
struct Setup {
  ModelConfig config;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<Qwen3VlMoeModel> model;
  std::unique_ptr<ResidentExpertProvider> resident;
  std::unique_ptr<OffloadExpertProvider> offload;  // null without a budget
  ExpertProvider* experts() {
    if (offload) return offload.get();
    return resident.get();
  }
};

absl::StatusOr<Setup> Load(const BatchSweepOptions& o) {
  Setup s;
  VISMOE_ASSIGN_OR_RETURN(s.config, ModelConfig::Load(o.model_path));
  s.pool = std::make_unique<ThreadPool>(o.num_threads);
  if (o.synthetic_weights) {
    VISMOE_ASSIGN_OR_RETURN(s.ckpt,
                            SynthesizeCheckpoint(s.config, o.synthetic_seed, s.pool.get(),
                                                 "synthetic:" + o.model_path, o.synthetic_routing));
  } else {
    VISMOE_ASSIGN_OR_RETURN(s.ckpt, Checkpoint::Open(o.model_path));
  }
  VISMOE_ASSIGN_OR_RETURN(s.model, Qwen3VlMoeModel::Create(s.config, *s.ckpt, s.pool.get()));
  const ExpertNaming prefix = Qwen3VlMoeModel::Experts(s.config);
  VISMOE_ASSIGN_OR_RETURN(s.resident,
                          ResidentExpertProvider::Create(*s.ckpt, s.config.text, prefix));
  if (o.budget_bytes > 0) {
    VISMOE_ASSIGN_OR_RETURN(const ModelSizes sizes,
                            MeasureModelSizes(*s.ckpt, s.config.text, prefix));
    MemoryPlanOptions po;
    po.budget_bytes = o.budget_bytes;
    po.pinned_layers = o.pinned_layers;
    VISMOE_ASSIGN_OR_RETURN(const std::unique_ptr<KvCache> kv,
                            s.model->CreateKvCache(o.kv_cache_tokens));
    po.kv_cache_bytes = kv->bytes();
    VISMOE_ASSIGN_OR_RETURN(const MemoryPlan plan, MakeMemoryPlan(sizes, po));
    OffloadOptions oo = o.offload;
    oo.prefetch = "none";
    VISMOE_ASSIGN_OR_RETURN(
        s.offload, OffloadExpertProvider::Create(*s.resident, s.config.text, plan, oo, nullptr));
  }
  return s;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// B sequences: prefill each alone, then decode together; times the decode.
absl::StatusOr<BatchSweepRow> RunOne(Setup& s, const BatchSweepOptions& o, int batch) {
  const int vocab = s.config.text.vocab_size;
  const TextConfig& t = s.config.text;
  const bool preload = s.offload && o.offload.preload == "prefill-routing";
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<std::unique_ptr<SequencePreload>> preloads;  // ended when destroyed
  std::vector<std::vector<int>> next(batch);
  std::vector<std::vector<float>> logits(batch);
  uint64_t preload_bytes = 0;
  for (int b = 0; b < batch; ++b) {
    VISMOE_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                            s.model->CreateKvCache(o.prompt_tokens + o.decode_steps));
    std::vector<int> prompt(o.prompt_tokens);
    // Distinct prompts, away from the added tokens at the top of the vocabulary.
    for (int i = 0; i < o.prompt_tokens; ++i) prompt[i] = (97 * (i + 1) + 389 * b) % (vocab / 2);
    DecoderInput in;
    in.tokens = prompt;
    if (preload) {
      const int n =
          o.offload.preload_experts > 0 ? o.offload.preload_experts : t.num_experts_per_tok;
      preloads.push_back(std::make_unique<SequencePreload>(s.offload.get(), t.num_hidden_layers,
                                                           t.num_experts, n));
      in.observer = preloads.back().get();
    }
    VISMOE_RETURN_IF_ERROR(s.model->Forward(in, cache.get(), s.experts(), &logits[b]));
    next[b] = {Argmax(logits[b])};
    caches.push_back(std::move(cache));
    if (preload) {
      (void)s.offload->TakeRequestStats();  // the prefill's copies are not the decode's
      preloads.back()->Start();
      preload_bytes += s.offload->TakeRequestStats().bytes_h2d;
    }
  }
  if (s.offload) (void)s.offload->TakeRequestStats();  // count the decode only
  std::vector<DecoderInput> inputs(batch);
  std::vector<DecoderBatchEntry> entries(batch);
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < o.decode_steps; ++step) {
    for (int b = 0; b < batch; ++b) {
      inputs[b].tokens = next[b];
      inputs[b].phase = Phase::kDecode;
      entries[b] = {&inputs[b], caches[b].get(), &logits[b]};
    }
    VISMOE_RETURN_IF_ERROR(s.model->ForwardBatch(entries, s.experts()));
    for (int b = 0; b < batch; ++b) next[b] = {Argmax(logits[b])};
  }
  BatchSweepRow row;
  row.batch = batch;
  row.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.tokens = int64_t{batch} * o.decode_steps;
  if (s.offload) {
    const OffloadStats decode = s.offload->TakeRequestStats();
    row.bytes_h2d = decode.bytes_h2d + preload_bytes;
    row.preload_bytes = preload_bytes;
    row.preload_used = decode.preload_used;
  }
  return row;
}

}  // namespace

absl::StatusOr<std::vector<BatchSweepRow>> RunBatchSweep(const BatchSweepOptions& o) {
  if (o.prompt_tokens < 1 || o.decode_steps < 1) {
    return absl::InvalidArgumentError("batch sweep: prompt tokens and decode steps must be >= 1");
  }
  for (int b : o.batch_sizes) {
    if (b < 1) return absl::InvalidArgumentError(absl::StrCat("batch sweep: batch size ", b));
  }
  VISMOE_ASSIGN_OR_RETURN(Setup s, Load(o));
  std::vector<BatchSweepRow> rows;
  for (int b : o.batch_sizes) {
    VISMOE_ASSIGN_OR_RETURN(BatchSweepRow row, RunOne(s, o, b));
    rows.push_back(row);
  }
  return rows;
}

nlohmann::json BatchSweepJson(const std::vector<BatchSweepRow>& rows, int decode_steps) {
  nlohmann::json out = nlohmann::json::array();
  for (const BatchSweepRow& r : rows) {
    out.push_back({{"batch", r.batch},
                   {"tokens", r.tokens},
                   {"seconds", r.seconds},
                   {"tokens_per_s", r.tokens_per_s()},
                   {"ms_per_step", decode_steps > 0 ? 1e3 * r.seconds / decode_steps : 0.0},
                   {"bytes_h2d", r.bytes_h2d},
                   {"bytes_per_token", r.bytes_per_token()},
                   {"preload_bytes", r.preload_bytes},
                   {"preload_used", r.preload_used}});
  }
  return out;
}

}  // namespace vismoe::bench
