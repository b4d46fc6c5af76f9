#include "engine/runtime/token_output.h"

#include <algorithm>
#include <utility>

namespace vismoe {

TokenOutput::TokenOutput(const SamplingParams& sampling, const Tokenizer* tokenizer,
                         absl::Span<const int> eos_ids, const HarmonyTokens* harmony,
                         OnDelta on_delta, GenerateResult* result)
    : sampling_(sampling),
      eos_ids_(eos_ids.begin(), eos_ids.end()),
      on_delta_(std::move(on_delta)),
      result_(result),
      sampler_(sampling),
      decoder_(tokenizer, /*skip_special=*/true),
      stops_(sampling.stop),
      reasoning_decoder_(tokenizer, /*skip_special=*/true) {
  if (harmony != nullptr) harmony_.emplace(*harmony, tokenizer);
}

bool TokenOutput::Emit(const std::string& text, const std::string& reasoning, bool force) {
  result_->reasoning += reasoning;
  if (text.empty() && reasoning.empty() && !force) return true;
  if (text.empty() && reasoning.empty() && delta_ids_.empty()) return true;
  TokenDelta d{text, reasoning, std::move(delta_ids_)};
  delta_ids_.clear();
  return !on_delta_ || on_delta_(d);
}

bool TokenOutput::Accept(absl::Span<const float> logits, bool room) {
  return AcceptToken(sampler_.Sample(logits), room);
}

bool TokenOutput::AcceptToken(int tok, bool room) {
  sampler_.Consumed();  // a device may have drawn it from NextDraw()
  if (result_->token_ids.empty()) first_token_ = std::chrono::steady_clock::now();
  if (std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end()) {
    Finish(FinishReason::kEos);
    return true;
  }
  result_->token_ids.push_back(tok);
  delta_ids_.push_back(tok);
  const HarmonyReply::Part part =
      harmony_.has_value() ? harmony_->Push(tok) : HarmonyReply::Part::kAnswer;
  StopMatcher::Step step;
  std::string reasoning;
  if (part == HarmonyReply::Part::kAnswer) step = stops_.Push(decoder_.Push(tok));
  if (part == HarmonyReply::Part::kReasoning) reasoning = reasoning_decoder_.Push(tok);
  if (!Emit(step.ready, reasoning, false)) {
    Cancel();
    return true;
  }
  if (step.stopped) {
    Emit("", "", true);
    Finish(FinishReason::kStopString);
    return true;
  }
  if (static_cast<int>(result_->token_ids.size()) >= sampling_.max_new_tokens || !room) {
    Finish(FinishReason::kLength);
    return true;
  }
  return false;
}

void TokenOutput::Cancel() {
  if (finished_) return;
  finished_ = true;
  result_->finish_reason = FinishReason::kCancelled;
  result_->text = stops_.emitted();
}

// EOS or length: release what the decoder and the stop matcher held back (a
// stop string may still complete there).
void TokenOutput::Finish(FinishReason reason) {
  finished_ = true;
  result_->finish_reason = reason;
  if (reason == FinishReason::kEos || reason == FinishReason::kLength) {
    StopMatcher::Step step = stops_.Push(decoder_.Flush());
    std::string rest = step.ready + (step.stopped ? "" : stops_.Flush());
    if (step.stopped) result_->finish_reason = FinishReason::kStopString;
    Emit(rest, reasoning_decoder_.Flush(), true);  // the caller can no longer cancel here
  }
  result_->text = stops_.emitted();
}

}  // namespace vismoe
