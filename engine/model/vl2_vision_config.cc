#include "engine/model/vl2_vision_config.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", field, " ", why));
}

// A positive integer field of `o` (required).
absl::Status PositiveInt(const json& o, const std::string& path, const char* key, int* out) {
  if (!o.contains(key) || !o[key].is_number_integer() || o[key].get<int64_t>() < 1 ||
      o[key].get<int64_t>() > (1 << 20)) {
    return Bad(absl::StrCat(path, ".", key), "must be a positive integer");
  }
  *out = o[key].get<int>();
  return absl::OkStatus();
}

absl::Status ParseVision(const json& v, Vl2VisionConfig* c) {
  if (!v.is_object()) return Bad("vision_config", "must be an object");
  for (auto [key, out] : {std::pair{"image_size", &c->image_size},
                          {"patch_size", &c->patch_size},
                          {"width", &c->width},
                          {"layers", &c->layers},
                          {"heads", &c->heads}}) {
    VISMOE_RETURN_IF_ERROR(PositiveInt(v, "vision_config", key, out));
  }
  if (!v.contains("mlp_ratio") || !v["mlp_ratio"].is_number() ||
      !(v["mlp_ratio"].get<double>() > 0)) {
    return Bad("vision_config.mlp_ratio", "must be a positive number");
  }
  c->mlp_dim = static_cast<int>(c->width * v["mlp_ratio"].get<double>());  // timm's int()
  if (c->width % c->heads != 0) return Bad("vision_config.heads", "must divide width");
  if (c->patch_size > c->image_size) return Bad("vision_config.patch_size", "exceeds image_size");
  return absl::OkStatus();
}

absl::Status ParseProjector(const json& p, Vl2VisionConfig* c) {
  if (!p.is_object()) return Bad("projector_config", "must be an object");
  const std::string type = p.value("projector_type", std::string("downsample_mlp_gelu"));
  if (type != "downsample_mlp_gelu") {
    return Bad("projector_config.projector_type",
               absl::StrCat("'", type, "' is not supported (downsample_mlp_gelu)"));
  }
  if (p.value("token_pooling", false))
    return Bad("projector_config.token_pooling", "true is not supported");
  if (p.value("mlp_ratio", 1) != 1)
    return Bad("projector_config.mlp_ratio", "other than 1 is not supported");
  VISMOE_RETURN_IF_ERROR(PositiveInt(p, "projector_config", "n_embed", &c->n_embed));
  c->downsample = 2;
  if (p.contains("downsample_ratio")) {
    VISMOE_RETURN_IF_ERROR(PositiveInt(p, "projector_config", "downsample_ratio", &c->downsample));
  }
  c->projector_depth = 2;
  if (p.contains("depth"))
    VISMOE_RETURN_IF_ERROR(PositiveInt(p, "projector_config", "depth", &c->projector_depth));
  if (p.contains("input_dim") && p["input_dim"] != c->width) {
    return Bad("projector_config.input_dim", "must equal vision_config.width");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Vl2VisionConfig> Vl2VisionConfig::Parse(const std::string& config_json) {
  const json root = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return absl::InvalidArgumentError("config.json: not a JSON object");
  Vl2VisionConfig c;
  if (!root.contains("vision_config")) return Bad("vision_config", "is missing");
  VISMOE_RETURN_IF_ERROR(ParseVision(root["vision_config"], &c));
  if (!root.contains("projector_config")) return Bad("projector_config", "is missing");
  VISMOE_RETURN_IF_ERROR(ParseProjector(root["projector_config"], &c));
  if (root.value("tile_tag", std::string("2D")) != "2D") return Bad("tile_tag", "must be 2D");
  const std::string pos = root.value("global_view_pos", std::string("head"));
  if (pos != "head" && pos != "tail") return Bad("global_view_pos", "must be head or tail");
  c.global_view_head = pos == "head";
  if (!root.contains("candidate_resolutions") || !root["candidate_resolutions"].is_array() ||
      root["candidate_resolutions"].empty()) {
    return Bad("candidate_resolutions", "must be a non-empty list of [width, height]");
  }
  for (const json& r : root["candidate_resolutions"]) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer() ||
        r[0].get<int64_t>() < 1 || r[1].get<int64_t>() < 1 || r[0].get<int64_t>() > (1 << 16) ||
        r[1].get<int64_t>() > (1 << 16)) {
      return Bad("candidate_resolutions", "must be a non-empty list of [width, height]");
    }
    c.candidates.push_back({r[0].get<int>(), r[1].get<int>()});
  }
  return c;
}

}  // namespace vismoe
