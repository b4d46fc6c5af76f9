// Chat messages as the chat template renders them: ordered text and image parts.
#ifndef VISMOE_ENGINE_MODEL_CHAT_MESSAGE_H_
#define VISMOE_ENGINE_MODEL_CHAT_MESSAGE_H_

#include <string>
#include <vector>

namespace vismoe {

// One ordered part of a chat message: text, or a reference to an image of the
// request (index into GenerateRequest::images).
struct ContentPart {
  enum class Kind { kText, kImage };
  Kind kind = Kind::kText;
  std::string text;
  int image_index = -1;
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::vector<ContentPart> content;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_CHAT_MESSAGE_H_
