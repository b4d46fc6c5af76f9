#include "tests/testing/golden_cases.h"

#include <fstream>
#include <sstream>

namespace vismoe::testing {

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json ReadJsonFile(const std::string& path) {
  return nlohmann::json::parse(ReadTextFile(path), nullptr, false);
}

GenerateRequest TextRequestFromCase(const nlohmann::json& c, int max_new_tokens) {
  GenerateRequest r;
  for (const auto& m : c["messages"]) {
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    ContentPart part;
    part.text = m["content"].get<std::string>();
    msg.content.push_back(part);
    r.messages.push_back(msg);
  }
  r.sampling.max_new_tokens = max_new_tokens;
  return r;
}

}  // namespace vismoe::testing
