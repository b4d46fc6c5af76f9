#include "engine/model/image_preprocessor.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/image_resize.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

using json = nlohmann::json;

constexpr char kFile[] = "preprocessor_config.json";
constexpr char kProcessorFile[] = "processor_config.json";

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(kFile, ": ", field, " ", why));
}

// Reads an optional integer >= min_value at obj[key] into *out.
absl::Status ReadInt(const json& obj, const char* key, int64_t min_value, int64_t* out,
                     absl::string_view path) {
  if (!obj.contains(key) || obj[key].is_null()) return absl::OkStatus();
  const json& v = obj[key];
  if (!v.is_number_integer()) return Bad(absl::StrCat(path, key), "must be an integer");
  const int64_t x = v.get<int64_t>();
  if (x < min_value) return Bad(absl::StrCat(path, key), absl::StrCat("must be >= ", min_value));
  *out = x;
  return absl::OkStatus();
}

absl::Status ReadInt32(const json& obj, const char* key, int64_t min_value, int* out) {
  int64_t v = *out;
  VISMOE_RETURN_IF_ERROR(ReadInt(obj, key, min_value, &v, ""));
  if (v > (int64_t{1} << 20)) return Bad(key, "is implausibly large");
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ReadBool(const json& obj, const char* key, bool* out) {
  if (!obj.contains(key) || obj[key].is_null()) return absl::OkStatus();
  if (!obj[key].is_boolean()) return Bad(key, "must be true or false");
  *out = obj[key].get<bool>();
  return absl::OkStatus();
}

absl::Status ReadTriple(const json& obj, const char* key, bool positive,
                        std::array<float, 3>* out) {
  if (!obj.contains(key) || obj[key].is_null()) return absl::OkStatus();
  const json& v = obj[key];
  if (v.is_number()) {  // transformers accepts one value for all channels
    out->fill(v.get<float>());
  } else if (v.is_array() && v.size() == 3) {
    for (int i = 0; i < 3; ++i) {
      if (!v[i].is_number()) return Bad(key, "must hold numbers");
      (*out)[i] = v[i].get<float>();
    }
  } else {
    return Bad(key, "must be a number or a list of 3 numbers");
  }
  if (positive) {
    for (float x : *out) {
      if (!(x > 0.0f)) return Bad(key, "entries must be > 0");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreprocessorConfig> PreprocessorConfig::Parse(absl::string_view json_text) {
  const json doc = json::parse(json_text.begin(), json_text.end(), nullptr,
                               /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(kFile, " is not a JSON object"));
  }
  // transformers v5 saves processor_config.json with the image processor's
  // fields nested under "image_processor".
  const bool nested = doc.contains("image_processor");
  if (nested && !doc["image_processor"].is_object()) {
    return Bad("image_processor", "must be an object");
  }
  const json& root = nested ? doc["image_processor"] : doc;
  PreprocessorConfig c;
  VISMOE_RETURN_IF_ERROR(ReadInt32(root, "patch_size", 1, &c.patch_size));
  VISMOE_RETURN_IF_ERROR(ReadInt32(root, "temporal_patch_size", 1, &c.temporal_patch_size));
  VISMOE_RETURN_IF_ERROR(ReadInt32(root, "merge_size", 1, &c.merge_size));
  // As Qwen2VLImageProcessor.__init__: size first, top-level min/max_pixels override.
  if (root.contains("size") && !root["size"].is_null()) {
    const json& size = root["size"];
    if (!size.is_object()) return Bad("size", "must be an object");
    VISMOE_RETURN_IF_ERROR(ReadInt(size, "shortest_edge", 1, &c.min_pixels, "size."));
    VISMOE_RETURN_IF_ERROR(ReadInt(size, "longest_edge", 1, &c.max_pixels, "size."));
  }
  VISMOE_RETURN_IF_ERROR(ReadInt(root, "min_pixels", 1, &c.min_pixels, ""));
  VISMOE_RETURN_IF_ERROR(ReadInt(root, "max_pixels", 1, &c.max_pixels, ""));
  if (c.min_pixels > c.max_pixels) {
    return Bad("min_pixels",
               absl::StrCat("(", c.min_pixels, ") exceeds max_pixels (", c.max_pixels, ")"));
  }
  VISMOE_RETURN_IF_ERROR(ReadBool(root, "do_resize", &c.do_resize));
  VISMOE_RETURN_IF_ERROR(ReadInt32(root, "resample", 0, &c.resample));
  if (c.resample != 3) {
    return Bad("resample", absl::StrCat("= ", c.resample, " is not supported (only 3, bicubic)"));
  }
  VISMOE_RETURN_IF_ERROR(ReadBool(root, "do_rescale", &c.do_rescale));
  if (root.contains("rescale_factor") && !root["rescale_factor"].is_null()) {
    if (!root["rescale_factor"].is_number()) return Bad("rescale_factor", "must be a number");
    c.rescale_factor = root["rescale_factor"].get<double>();
    if (!(c.rescale_factor > 0.0)) return Bad("rescale_factor", "must be > 0");
  }
  VISMOE_RETURN_IF_ERROR(ReadBool(root, "do_normalize", &c.do_normalize));
  VISMOE_RETURN_IF_ERROR(ReadTriple(root, "image_mean", false, &c.image_mean));
  VISMOE_RETURN_IF_ERROR(ReadTriple(root, "image_std", true, &c.image_std));
  return c;
}

absl::StatusOr<PreprocessorConfig> PreprocessorConfig::Load(const std::string& dir) {
  std::string path = dir + "/" + kFile;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    path = dir + "/" + kProcessorFile;
    in.open(path, std::ios::binary);
  }
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", dir, "/", kFile, " or ", dir, "/", kProcessorFile));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto c = Parse(text);
  if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", c.status().message()));
  return c;
}

absl::StatusOr<std::pair<int, int>> SmartResize(int height, int width, int factor,
                                                int64_t min_pixels, int64_t max_pixels) {
  if (height < 1 || width < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("image size ", width, "x", height, " has a side smaller than 1"));
  }
  const double ratio = static_cast<double>(std::max(height, width)) / std::min(height, width);
  if (ratio > 200.0) {
    return absl::InvalidArgumentError(absl::StrCat("image aspect ratio must be at most 200, got ",
                                                   ratio, " (", width, "x", height, ")"));
  }
  // Python's round() rounds half to even, as nearbyint does by default.
  int64_t h_bar =
      static_cast<int64_t>(std::nearbyint(static_cast<double>(height) / factor)) * factor;
  int64_t w_bar =
      static_cast<int64_t>(std::nearbyint(static_cast<double>(width) / factor)) * factor;
  const double area = static_cast<double>(height) * width;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(factor,
                              static_cast<int64_t>(std::floor(height / beta / factor)) * factor);
    w_bar =
        std::max<int64_t>(factor, static_cast<int64_t>(std::floor(width / beta / factor)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<int64_t>(std::ceil(height * beta / factor)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(width * beta / factor)) * factor;
  }
  if (h_bar < factor || w_bar < factor || h_bar > (1 << 20) || w_bar > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("image ", width, "x", height,
                                                   " cannot be resized to a valid grid (got ",
                                                   w_bar, "x", h_bar, ")"));
  }
  return std::make_pair(static_cast<int>(h_bar), static_cast<int>(w_bar));
}

absl::StatusOr<ImagePreprocessor> ImagePreprocessor::Create(const std::string& dir,
                                                            const PreprocessOptions& options) {
  VISMOE_ASSIGN_OR_RETURN(PreprocessorConfig config, PreprocessorConfig::Load(dir));
  return FromConfig(config, options);
}

absl::StatusOr<ImagePreprocessor> ImagePreprocessor::FromConfig(const PreprocessorConfig& config,
                                                                const PreprocessOptions& options) {
  if (config.patch_size < 1 || config.temporal_patch_size < 1 || config.merge_size < 1) {
    return absl::InvalidArgumentError("preprocessor config: patch sizes must be >= 1");
  }
  if (config.min_pixels < 1 || config.min_pixels > config.max_pixels) {
    return absl::InvalidArgumentError("preprocessor config: need 1 <= min_pixels <= max_pixels");
  }
  if (config.resample != 3) {
    return absl::InvalidArgumentError("preprocessor config: only bicubic resampling (3)");
  }
  if (options.max_input_pixels < 1) {
    return absl::InvalidArgumentError("PreprocessOptions.max_input_pixels must be >= 1");
  }
  return ImagePreprocessor(config, options);
}

int64_t ImagePreprocessor::patch_dim() const {
  return int64_t{3} * config_.temporal_patch_size * config_.patch_size * config_.patch_size;
}

absl::StatusOr<PreprocessedImage> ImagePreprocessor::Process(const RgbImage& image) const {
  const int64_t w = image.width;
  const int64_t h = image.height;
  if (w < 1 || h < 1) {
    return absl::InvalidArgumentError(absl::StrCat("image is empty (", w, "x", h, ")"));
  }
  if (w * h > options_.max_input_pixels) {
    return absl::InvalidArgumentError(absl::StrCat("image ", w, "x", h, " has ", w * h,
                                                   " pixels, more than the limit of ",
                                                   options_.max_input_pixels));
  }
  if (static_cast<int64_t>(image.pixels.size()) != w * h * 3) {
    return absl::InvalidArgumentError(absl::StrCat("image buffer holds ", image.pixels.size(),
                                                   " bytes, expected ", w, "*", h,
                                                   "*3 = ", w * h * 3, " for RGB8"));
  }
  const int factor = config_.patch_size * config_.merge_size;
  // Same checks as smart_resize even without resizing (transformers calls it).
  VISMOE_ASSIGN_OR_RETURN(auto target, SmartResize(static_cast<int>(h), static_cast<int>(w), factor,
                                                   config_.min_pixels, config_.max_pixels));
  int rh = static_cast<int>(h);
  int rw = static_cast<int>(w);
  std::vector<uint8_t> resized;
  const uint8_t* px = image.pixels.data();
  if (config_.do_resize) {
    std::tie(rh, rw) = target;
    if (rh != h || rw != w) {
      resized = ResizeBicubicAntialias(px, static_cast<int>(h), static_cast<int>(w), 3, rh, rw);
      px = resized.data();
    }
  } else if (rh % factor != 0 || rw % factor != 0) {
    return absl::InvalidArgumentError(absl::StrCat("do_resize is off and the image ", rw, "x", rh,
                                                   " is not a multiple of ", factor));
  }

  // Fused rescale + normalise as transformers does it: (x - mean/r) / (std/r).
  std::array<float, 3> sub{0.f, 0.f, 0.f};
  std::array<float, 3> div{1.f, 1.f, 1.f};
  float scale = 1.f;
  const bool fused = config_.do_rescale && config_.do_normalize;
  for (int c = 0; c < 3; ++c) {
    if (config_.do_normalize) {
      const float inv = fused ? static_cast<float>(1.0 / config_.rescale_factor) : 1.f;
      sub[c] = config_.image_mean[c] * inv;
      div[c] = config_.image_std[c] * inv;
    }
  }
  if (config_.do_rescale && !config_.do_normalize)
    scale = static_cast<float>(config_.rescale_factor);

  const int p = config_.patch_size;
  const int m = config_.merge_size;
  const int tp = config_.temporal_patch_size;
  PreprocessedImage out;
  out.grid = GridThw{1, rh / p, rw / p};
  out.resized_height = rh;
  out.resized_width = rw;
  const int64_t dim = patch_dim();
  out.patches.resize(static_cast<size_t>(out.grid.num_patches() * dim));
  const int64_t gh = out.grid.h;
  const int64_t gw = out.grid.w;
  int64_t row_index = 0;
  for (int64_t bh = 0; bh < gh / m; ++bh) {
    for (int64_t bw = 0; bw < gw / m; ++bw) {
      for (int mh = 0; mh < m; ++mh) {
        for (int mw = 0; mw < m; ++mw, ++row_index) {
          const int64_t y0 = (bh * m + mh) * p;
          const int64_t x0 = (bw * m + mw) * p;
          float* dst = out.patches.data() + row_index * dim;
          for (int c = 0; c < 3; ++c) {
            for (int t = 0; t < tp; ++t) {  // frames are copies of the one image
              for (int y = 0; y < p; ++y) {
                const uint8_t* src = px + ((y0 + y) * rw + x0) * 3 + c;
                for (int x = 0; x < p; ++x) {
                  const float v = static_cast<float>(src[x * 3]);
                  *dst++ = config_.do_normalize ? (v - sub[c]) / div[c] : v * scale;
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace vismoe
