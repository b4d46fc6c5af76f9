// Sequence: one request in the engine's batch loop, from submission to its
// last token: what it runs (the prepared request and the caller's callbacks),
// how far it is (tokens prefilled, its KV cache: a block table over the
// engine's KV pool), what its prefill needs (vision output, token compression,
// observers) and what it has produced.
//
// Preemption (vLLM's recompute): a sequence the scheduler preempts gives its
// KV blocks back and keeps everything else (generated tokens, sampler, the
// text already streamed, vision output). When it runs again it prefills its
// prompt and then its generated tokens (`replay` of them) before it decodes
// on, so its KV rows are recomputed, and bit-identical on the CPU backend on
// the exact path. The recomputation is a prefill: decode-only policies
// (commit, speculative execution) do not act on it, so with them the rows,
// and later tokens, may differ from those of an uninterrupted run.
//
// Thread safety: the Generate thread creates it, submits it and waits on
// `done`; from Submit until done is notified only the engine's step thread
// touches it (and runs the callbacks there).
// Ownership: borrows the prepared request, the callbacks, the tokenizer and
// the predictor, which outlive the Generate call; owns everything else.
#ifndef VISMOE_ENGINE_RUNTIME_SEQUENCE_H_
#define VISMOE_ENGINE_RUNTIME_SEQUENCE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "engine/api/engine.h"
#include "engine/arch/text_decoder.h"
#include "engine/arch/vision_tower.h"
#include "engine/backend/kv_cache.h"
#include "engine/backend/kv_pool.h"
#include "engine/policy/compression_session.h"
#include "engine/policy/observer_chain.h"
#include "engine/policy/sequence_preload.h"
#include "engine/policy/token_compressor.h"
#include "engine/runtime/local_prepared.h"
#include "engine/runtime/token_output.h"

namespace vismoe {

struct Sequence {
  // start: when the request's time began (Prepare's time included). Its KV
  // cache takes blocks of `kv_pool` (which must outlive it) as it grows.
  // preload: its per-sequence preload (null = off), observing its steps.
  // harmony: the model's harmony tokens (TokenOutput), or null.
  Sequence(const LocalPrepared& p, const GenerateCallbacks& cb, const Tokenizer* tokenizer,
           absl::Span<const int> eos_ids, const HarmonyTokens* harmony, RouterObserver* predictor,
           int64_t max_context, KvPool* kv_pool, std::chrono::steady_clock::time_point start,
           std::unique_ptr<SequencePreload> preload = nullptr)
      : prepared(p),
        callbacks(cb),
        start(start),
        kv_tokens(std::min<int64_t>(
            max_context, int64_t{p.prompt_tokens()} + p.request().sampling.max_new_tokens)),
        cache(std::make_unique<KvCache>(kv_pool, kv_tokens)),
        preload(std::move(preload)),
        chain{predictor, this->preload.get(), cb.router_observer},
        decode_chain{predictor, cb.router_observer},
        output(p.request().sampling, tokenizer, eos_ids, harmony, cb.on_delta, &result) {}
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  int64_t prompt_tokens() const { return prepared.prompt_tokens(); }
  // Tokens to put in the cache before decoding: the prompt, and after a
  // preemption the generated tokens too.
  int64_t prefill_tokens() const { return prompt_tokens() + replay; }
  bool prefilling() const { return prefilled < prefill_tokens(); }
  // The rest of the current prefill piece, which no chunk crosses: the
  // prompt, then the recomputed tokens (text, at decode positions).
  int64_t piece_left() const {
    return (prefilled < prompt_tokens() ? prompt_tokens() : prefill_tokens()) - prefilled;
  }
  // Whether the next chunk may be split. Token compression selects rows over
  // the whole prompt, so a compressed prompt is prefilled in one step; the
  // exact path, and recomputed tokens, may be split into chunks.
  bool chunkable() const {
    return prepared.compression.kind == "none" || prefilled >= prompt_tokens();
  }
  bool has_images() const { return !prepared.prompt.grids.empty(); }
  // Observers of its steps: [compression ->] predictor -> preload -> caller's
  // while prefilling; the preload reads only the prefill, so decode steps go
  // without it (an observer makes a backend bring the routing scores and rows
  // to the host).
  RouterObserver* observers() { return prefilling() ? chain.Head() : decode_chain.Head(); }
  // The expert-skipping rule its steps run with (a tool's override in the
  // callbacks first); null = off.
  const ExpertSkipping* skipping() const {
    if (callbacks.expert_skipping != nullptr) return callbacks.expert_skipping;
    return prepared.skipping.has_value() ? &*prepared.skipping : nullptr;
  }
  // The commit miss policy its decode steps run with; null = fetch.
  const CommitMissPolicy* commit() const {
    return prepared.commit.has_value() ? &*prepared.commit : nullptr;
  }

  const LocalPrepared& prepared;
  const GenerateCallbacks& callbacks;
  const std::chrono::steady_clock::time_point start;
  const int64_t kv_tokens;  // KV rows it may need: prompt + max_new_tokens, capped

  int64_t prefilled = 0;              // tokens of prefill_tokens() in the cache
  int64_t replay = 0;                 // generated tokens to recompute after a preemption
  int preemptions = 0;                // times it was preempted
  bool started = false;               // vision output and compression set up
  bool compression_reported = false;  // its pruned tokens went to the stats once
  std::unique_ptr<KvCache> cache;     // holds blocks while running
  VisionOutput vision;
  std::unique_ptr<TokenCompressor> compressor;      // only off the exact path
  std::unique_ptr<CompressionSession> compression;  // only off the exact path
  // Started once its prefill is done and it goes on decoding; ended by
  // BatchLoop::Finish (engine/policy/sequence_preload.h).
  std::unique_ptr<SequencePreload> preload;
  ObserverChain chain;
  ObserverChain decode_chain;
  DecoderInput input;  // this step's, rebuilt every step
  std::vector<float> logits;
  // The step's token when the decoder returned no logits, and how it was
  // drawn (DecoderBatchEntry::token, draw).
  int token = -1;
  TokenDraw draw;
  // Whether its steps may return the token instead of logits: no caller
  // wants the prefill's logits.
  bool tokens_only() const { return !callbacks.on_prefill_logits; }

  GenerateResult result;
  TokenOutput output;
  absl::Status status;  // an error ends the request with it instead of `result`
  absl::Notification done;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_SEQUENCE_H_
