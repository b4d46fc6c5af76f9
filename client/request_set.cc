#include "client/request_set.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "client/png_writer.h"

namespace vismoe::client {
namespace {

absl::StatusOr<PromptSpec> ParseOne(const JsonlRecord& record, const std::string& source) {
  const nlohmann::json& v = record.value;
  auto error = [&](const std::string& message) {
    return RecordError(source, record.line, message);
  };
  PromptSpec spec;
  auto prompt = v.find("prompt");
  if (prompt == v.end() || !prompt->is_string()) {
    return error("\"prompt\" is required and must be a string");
  }
  spec.prompt = prompt->get<std::string>();
  if (auto system = v.find("system"); system != v.end()) {
    if (!system->is_string()) return error("\"system\" must be a string");
    spec.system = system->get<std::string>();
  }
  if (auto max_new = v.find("max_new_tokens"); max_new != v.end()) {
    if (!max_new->is_number_integer() || max_new->get<int64_t>() < 0 ||
        max_new->get<int64_t>() > (1 << 20)) {
      return error(absl::StrCat("\"max_new_tokens\" must be an integer in [0, 1048576], got ",
                                max_new->dump()));
    }
    spec.max_new_tokens = max_new->get<int>();
  }
  if (auto images = v.find("images"); images != v.end()) {
    if (!images->is_array()) return error("\"images\" must be an array of file paths");
    for (const nlohmann::json& path : *images) {
      if (!path.is_string()) return error("\"images\" entries must be strings (file paths)");
      absl::StatusOr<ImageInput> image =
          ReadImageFile(ResolvePath(path.get<std::string>(), source));
      if (!image.ok()) return error(std::string(image.status().message()));
      spec.images.push_back(*std::move(image));
    }
  }
  if (spec.prompt.empty() && spec.images.empty()) {
    return error("a request needs a non-empty \"prompt\" or at least one image");
  }
  return spec;
}

// A smooth colour field with a few rectangles, so images are not uniform.
ImageInput MakeImage(int width, int height, std::mt19937_64& rng, int index) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  std::uniform_int_distribution<int> byte(0, 255);
  const int base_r = byte(rng), base_g = byte(rng), base_b = byte(rng);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* px = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      px[0] = static_cast<uint8_t>((base_r + x * 255 / width) & 0xFF);
      px[1] = static_cast<uint8_t>((base_g + y * 255 / height) & 0xFF);
      px[2] = static_cast<uint8_t>(base_b);
    }
  }
  for (int r = 0; r < 3; ++r) {
    std::uniform_int_distribution<int> xs(0, width - 1), ys(0, height - 1);
    int x0 = xs(rng), x1 = xs(rng), y0 = ys(rng), y1 = ys(rng);
    if (x0 > x1) std::swap(x0, x1);
    if (y0 > y1) std::swap(y0, y1);
    const uint8_t c[3] = {static_cast<uint8_t>(byte(rng)), static_cast<uint8_t>(byte(rng)),
                          static_cast<uint8_t>(byte(rng))};
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) {
        uint8_t* px = &rgb[(static_cast<size_t>(y) * width + x) * 3];
        px[0] = c[0], px[1] = c[1], px[2] = c[2];
      }
    }
  }
  ImageInput image;
  image.source = absl::StrCat("synthetic:", index);
  image.bytes = EncodePngRgb(width, height, rgb.data());
  image.media_type = "image/png";
  return image;
}

}  // namespace

absl::StatusOr<std::vector<PromptSpec>> ParseRequestRecords(const std::vector<JsonlRecord>& records,
                                                            const std::string& source) {
  std::vector<PromptSpec> specs;
  specs.reserve(records.size());
  for (const JsonlRecord& record : records) {
    absl::StatusOr<PromptSpec> spec = ParseOne(record, source);
    if (!spec.ok()) return spec.status();
    specs.push_back(*std::move(spec));
  }
  return specs;
}

absl::StatusOr<std::vector<PromptSpec>> LoadRequestSet(const std::string& path) {
  absl::StatusOr<std::vector<JsonlRecord>> records = ReadJsonlFile(path);
  if (!records.ok()) return records.status();
  return ParseRequestRecords(*records, path);
}

std::vector<PromptSpec> MakeSyntheticRequestSet(int count, uint64_t seed) {
  static const char* const kPrompts[] = {
      "Describe this image in one sentence.",
      "What colours dominate the picture?",
      "How many rectangles can you see?",
      "Write a short poem about the sea.",
      "Compare the two images.",
      "Is there anything unusual here? Answer briefly.",
  };
  constexpr int kNumPrompts = sizeof(kPrompts) / sizeof(kPrompts[0]);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> side(2, 8);  // x32 -> 64..256 pixels
  std::vector<PromptSpec> specs;
  int image_index = 0;
  for (int i = 0; i < count; ++i) {
    PromptSpec spec;
    spec.prompt = kPrompts[i % kNumPrompts];
    // Cycle 1, 0, 1, 2 images so the set mixes text-only and multi-image load.
    static const int kImageCounts[] = {1, 0, 1, 2};
    const int num_images = kImageCounts[i % 4];
    for (int k = 0; k < num_images; ++k) {
      const int w = side(rng) * 32, h = side(rng) * 32;
      spec.images.push_back(MakeImage(w, h, rng, image_index++));
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace vismoe::client
