#include "engine/model/harmony_reply.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"

namespace vismoe {

std::optional<HarmonyTokens> HarmonyTokens::Find(const Tokenizer& tokenizer) {
  HarmonyTokens t;
  for (auto [name, id] : {std::pair{"<|start|>", &t.start},
                          {"<|end|>", &t.end},
                          {"<|message|>", &t.message},
                          {"<|channel|>", &t.channel},
                          {"<|constrain|>", &t.constrain}}) {
    *id = tokenizer.TokenToId(name);
    if (*id < 0) return std::nullopt;
  }
  return t;
}

// Control tokens move the state and carry no text; a header the model starts
// without ending the message first (a new <|channel|>) is taken as one.
HarmonyReply::Part HarmonyReply::Push(int id) {
  if (id == t_.start || id == t_.channel) {
    state_ = id == t_.start ? State::kHeader : State::kChannel;
    channel_.clear();
    return Part::kControl;
  }
  if (id == t_.constrain) {
    if (state_ == State::kChannel) state_ = State::kHeader;  // the type, then <|message|>
    return Part::kControl;
  }
  if (id == t_.message) {
    // "analysis", or "analysis to=..." with a recipient after the channel.
    const absl::string_view header = absl::StripLeadingAsciiWhitespace(channel_);
    reasoning_ = header.substr(0, header.find(' ')) == "analysis";
    state_ = State::kMessage;
    return Part::kControl;
  }
  if (id == t_.end) {
    state_ = State::kBetween;
    return Part::kControl;
  }
  switch (state_) {
    case State::kMessage:
      return reasoning_ ? Part::kReasoning : Part::kAnswer;
    case State::kChannel:
      channel_ += tokenizer_->TokenBytes(id);
      return Part::kControl;
    case State::kHeader:
    case State::kBetween:
      return Part::kControl;
  }
  return Part::kControl;
}

}  // namespace vismoe
