// TokenOutput: what happens to a sequence's logits after a step -- sample the
// next token, turn it into text, match stop strings, stream deltas, and
// decide whether the sequence is finished (EOS, stop string, length, or the
// caller cancelling from its delta callback). For a harmony model (GPT-OSS)
// the reply's channels are split (engine/model/harmony_reply.h): the
// reasoning streams apart from the answer, stop strings match the answer
// only, and the headers and control tokens are not text.
//
// Thread safety: none; used by the thread running the sequence's steps.
// Ownership: borrows the tokenizer and writes into a GenerateResult the
// caller owns; both must outlive it.
#ifndef VISMOE_ENGINE_RUNTIME_TOKEN_OUTPUT_H_
#define VISMOE_ENGINE_RUNTIME_TOKEN_OUTPUT_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/api/request.h"
#include "engine/model/harmony_reply.h"
#include "engine/model/stream_decoder.h"
#include "engine/model/tokenizer.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/stop_matcher.h"

namespace vismoe {

class TokenOutput {
 public:
  using OnDelta = std::function<bool(const TokenDelta&)>;
  // REQUIRES: Sampler::Validate(sampling).ok(); tokenizer and result non-null.
  // harmony: the model's harmony tokens, or null for a plain reply.
  TokenOutput(const SamplingParams& sampling, const Tokenizer* tokenizer,
              absl::Span<const int> eos_ids, const HarmonyTokens* harmony, OnDelta on_delta,
              GenerateResult* result);

  // Samples a token from `logits` (the last row of the step) and streams it.
  // `room`: whether the KV cache can take one more token. Returns true when
  // the sequence has finished; result->finish_reason and text are then final.
  bool Accept(absl::Span<const float> logits, bool room);
  // The same for a token the caller drew itself by NextDraw().
  bool AcceptToken(int token, bool room);
  // How the next token is drawn (the same until a token is accepted): a
  // device picks it from the logits without sending them back.
  TokenDraw NextDraw() { return sampler_.NextDraw(); }
  // Ends the sequence early as cancelled (no held-back text is flushed, as
  // the caller no longer listens).
  void Cancel();

  bool finished() const { return finished_; }
  // When the first token was sampled (valid once one was).
  std::chrono::steady_clock::time_point first_token() const { return first_token_; }

 private:
  // Sends text (and reasoning) plus the ids produced since the last delta;
  // false = cancel.
  bool Emit(const std::string& text, const std::string& reasoning, bool force);
  void Finish(FinishReason reason);

  const SamplingParams sampling_;
  std::vector<int> eos_ids_;
  OnDelta on_delta_;
  GenerateResult* result_;
  Sampler sampler_;
  StreamDecoder decoder_;
  StopMatcher stops_;
  std::optional<HarmonyReply> harmony_;
  StreamDecoder reasoning_decoder_;
  std::vector<int> delta_ids_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point first_token_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_TOKEN_OUTPUT_H_
