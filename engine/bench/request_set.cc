#include "engine/bench/request_set.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/rgb_convert.h"
#include "nlohmann/json.hpp"

namespace vismoe::bench {
namespace {

constexpr char kLineFormat[] =
    "expected {\"prompt\": string, \"max_new_tokens\": int >= 1 (optional), "
    "\"images\": [path, ...] (optional), \"temperature\": number in [0, 100] (optional), "
    "\"seed\": int >= 0 (optional)}";

absl::StatusOr<BenchRequest> ParseLine(const std::string& line, const std::filesystem::path& dir,
                                       int default_max_new_tokens) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("not JSON; ", kLineFormat));
  if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("no string \"prompt\"; ", kLineFormat));
  }
  BenchRequest r;
  r.prompt = j["prompt"].get<std::string>();
  r.max_new_tokens = default_max_new_tokens;
  if (j.contains("max_new_tokens")) {
    const nlohmann::json& m = j["max_new_tokens"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"max_new_tokens\" is ", m.dump(), "; ", kLineFormat));
    }
    r.max_new_tokens = m.get<int>();
  }
  if (j.contains("temperature")) {
    const nlohmann::json& t = j["temperature"];
    if (!t.is_number() || !(t.get<double>() >= 0) || t.get<double>() > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"temperature\" is ", t.dump(), "; ", kLineFormat));
    }
    r.temperature = t.get<float>();
  }
  if (j.contains("seed")) {
    const nlohmann::json& s = j["seed"];
    if (!s.is_number_integer() || s.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("\"seed\" is ", s.dump(), "; ", kLineFormat));
    }
    r.seed = s.get<uint64_t>();
  }
  if (j.contains("images")) {
    const nlohmann::json& images = j["images"];
    if (!images.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("\"images\" is not an array; ", kLineFormat));
    }
    for (size_t i = 0; i < images.size(); ++i) {
      if (!images[i].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"images\"[", i, "] is not a string; ", kLineFormat));
      }
      std::filesystem::path p(images[i].get<std::string>());
      if (p.is_relative()) p = dir / p;
      r.image_paths.push_back(p.string());
      auto image = LoadImage(p.string());
      if (!image.ok()) {
        return absl::Status(image.status().code(),
                            absl::StrCat("\"images\"[", i, "]: ", image.status().message()));
      }
      r.images.push_back(*std::move(image));
    }
  }
  return r;
}

}  // namespace

GenerateRequest BenchRequest::ToGenerateRequest() const {
  GenerateRequest req;
  ChatMessage m;
  m.role = "user";
  for (size_t i = 0; i < images.size(); ++i) {
    ContentPart part;
    part.kind = ContentPart::Kind::kImage;
    part.image_index = static_cast<int>(i);
    m.content.push_back(part);
  }
  ContentPart text;
  text.text = prompt;
  m.content.push_back(text);
  req.messages.push_back(std::move(m));
  req.images = images;
  req.sampling.max_new_tokens = max_new_tokens;
  req.sampling.temperature = temperature;
  req.sampling.seed = seed;
  return req;
}

absl::StatusOr<std::vector<BenchRequest>> LoadRequestSet(const std::string& path,
                                                         int default_max_new_tokens) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open --requests file ", path));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::vector<BenchRequest> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto r = ParseLine(line, dir, default_max_new_tokens);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat(path, ":", n, ": ", r.status().message()));
    }
    out.push_back(*std::move(r));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " has no requests"));
  return out;
}

RgbImage SyntheticImage(int size, int index) {
  RgbImage img;
  img.width = img.height = size;
  img.pixels.reserve(static_cast<size_t>(size) * size * 3);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      img.pixels.push_back(static_cast<uint8_t>((x * 7 + index * 40) & 255));
      img.pixels.push_back(static_cast<uint8_t>((y * 5 + index * 90) & 255));
      img.pixels.push_back(static_cast<uint8_t>(((x ^ y) + index * 13) & 255));
    }
  }
  return img;
}

absl::StatusOr<BenchRequest> SingleRequest(const std::string& prompt, const std::string& image_path,
                                           int synthetic_images, int synthetic_image_size,
                                           int max_new_tokens) {
  BenchRequest r;
  r.prompt = prompt;
  r.max_new_tokens = max_new_tokens;
  for (int i = 0; i < synthetic_images; ++i) {
    r.image_paths.push_back(absl::StrCat("synthetic:", synthetic_image_size, "x",
                                         synthetic_image_size, "#", i));
    r.images.push_back(SyntheticImage(synthetic_image_size, i));
  }
  if (!image_path.empty()) {
    auto image = LoadImage(image_path);
    if (!image.ok()) {
      return absl::Status(image.status().code(),
                          absl::StrCat("--image: ", image.status().message()));
    }
    r.image_paths.push_back(image_path);
    r.images.push_back(*std::move(image));
  }
  return r;
}

}  // namespace vismoe::bench
