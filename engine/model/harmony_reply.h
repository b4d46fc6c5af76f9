// HarmonyReply: splits a GPT-OSS reply, written in OpenAI's harmony format,
// into its channels as it streams, token by token. The generation prompt ends
// "<|start|>assistant", so a reply opens with the rest of a message header
// ("<|channel|>analysis"), then "<|message|>", the message's text and
// "<|end|>"; a next message starts again at "<|start|>" ("assistant
// <|channel|>final<|message|>..."), and the reply ends at <|return|> or
// <|call|> (the checkpoint's end tokens, which never reach this class).
// Text of the "analysis" channel is the reasoning; the text of every other
// channel ("final", "commentary") is the answer; headers (role, channel,
// recipient, "<|constrain|>" type) and the control tokens are neither.
//
// Thread safety: none; one per streaming reply.
// Ownership: borrows the tokenizer, which must outlive it.
#ifndef VISMOE_ENGINE_MODEL_HARMONY_REPLY_H_
#define VISMOE_ENGINE_MODEL_HARMONY_REPLY_H_

#include <optional>
#include <string>

#include "engine/model/tokenizer.h"

namespace vismoe {

// The harmony control tokens' ids.
struct HarmonyTokens {
  int start = -1;      // <|start|>
  int end = -1;        // <|end|>
  int message = -1;    // <|message|>
  int channel = -1;    // <|channel|>
  int constrain = -1;  // <|constrain|>
  // All five, or nullopt when the tokenizer lacks any (not a harmony model).
  static std::optional<HarmonyTokens> Find(const Tokenizer& tokenizer);
};

class HarmonyReply {
 public:
  enum class Part { kControl, kAnswer, kReasoning };

  HarmonyReply(const HarmonyTokens& tokens, const Tokenizer* tokenizer)
      : t_(tokens), tokenizer_(tokenizer) {}

  // Where token `id`'s text belongs.
  Part Push(int id);

 private:
  enum class State { kHeader, kChannel, kMessage, kBetween };

  HarmonyTokens t_;
  const Tokenizer* tokenizer_;
  State state_ = State::kHeader;
  std::string channel_;  // the current message's channel header, as written
  bool reasoning_ = false;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_HARMONY_REPLY_H_
