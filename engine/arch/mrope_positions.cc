#include "engine/arch/mrope_positions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

absl::Status CheckGrid(const GridThw& g, int merge, size_t index) {
  if (g.t < 1 || g.h < 1 || g.w < 1 || g.h % merge != 0 || g.w % merge != 0) {
    return absl::InvalidArgumentError(absl::StrCat("image ", index, " has grid (", g.t, ", ", g.h,
                                                   ", ", g.w, "); need t, h, w >= 1 and h, w ",
                                                   "divisible by the merge size ", merge));
  }
  return absl::OkStatus();
}

int MergeSize(const ModelConfig& config) {
  return config.vision.spatial_merge_size > 0 ? config.vision.spatial_merge_size : 1;
}

}  // namespace

absl::StatusOr<MropePositions> ComputeMropePositions(absl::Span<const int> token_ids,
                                                     absl::Span<const GridThw> image_grids,
                                                     const ModelConfig& config) {
  const int merge = MergeSize(config);
  const int64_t n = static_cast<int64_t>(token_ids.size());
  MropePositions out;
  out.positions.assign(static_cast<size_t>(3 * n), 0);
  int64_t* pt = out.positions.data();
  int64_t* ph = pt + n;
  int64_t* pw = ph + n;
  int64_t s = 0;
  size_t image = 0;
  int64_t i = 0;
  while (i < n) {
    if (config.video_token_id >= 0 && token_ids[i] == config.video_token_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " is a video token; videos are not supported"));
    }
    if (token_ids[i] != config.image_token_id) {
      pt[i] = ph[i] = pw[i] = s++;
      ++i;
      continue;
    }
    int64_t run_end = i;
    while (run_end < n && token_ids[run_end] == config.image_token_id) ++run_end;
    if (image >= image_grids.size()) {
      return absl::InvalidArgumentError(absl::StrCat("the prompt has more image-pad runs than the ",
                                                     image_grids.size(),
                                                     " image grids given (run at token ", i, ")"));
    }
    const GridThw& g = image_grids[image];
    if (absl::Status st = CheckGrid(g, merge, image); !st.ok()) return st;
    const int64_t gh = g.h / merge;
    const int64_t gw = g.w / merge;
    if (run_end - i != g.t * gh * gw) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image ", image, ": the prompt has ", run_end - i, " image-pad tokens but its grid (",
          g.t, ", ", g.h, ", ", g.w, ") needs ", g.t * gh * gw));
    }
    int64_t k = i;
    for (int64_t ti = 0; ti < g.t; ++ti) {
      for (int64_t hi = 0; hi < gh; ++hi) {
        for (int64_t wi = 0; wi < gw; ++wi, ++k) {
          pt[k] = s + ti;
          ph[k] = s + hi;
          pw[k] = s + wi;
        }
      }
    }
    s += std::max(gh, gw);
    ++image;
    i = run_end;
  }
  if (image != image_grids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", image, " image-pad runs but ",
                                                   image_grids.size(), " image grids were given"));
  }
  const int64_t max_pos =
      n == 0 ? -1 : *std::max_element(out.positions.begin(), out.positions.end());
  out.rope_delta = max_pos + 1 - n;
  return out;
}

absl::StatusOr<std::vector<int>> ExpandImagePads(absl::Span<const int> token_ids,
                                                 absl::Span<const GridThw> image_grids,
                                                 const ModelConfig& config) {
  const int merge = MergeSize(config);
  std::vector<int> out;
  out.reserve(token_ids.size());
  size_t image = 0;
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (token_ids[i] != config.image_token_id) {
      out.push_back(token_ids[i]);
      continue;
    }
    if (i + 1 < token_ids.size() && token_ids[i + 1] == config.image_token_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image placeholder at token ", i, " is a run of several pads (already expanded?)"));
    }
    if (image >= image_grids.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the prompt has more image placeholders than the ", image_grids.size(), " images"));
    }
    const GridThw& g = image_grids[image];
    if (absl::Status st = CheckGrid(g, merge, image); !st.ok()) return st;
    out.insert(out.end(), static_cast<size_t>(g.num_merged(merge)), config.image_token_id);
    ++image;
  }
  if (image != image_grids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", image,
                                                   " image placeholders but ", image_grids.size(),
                                                   " images were given"));
  }
  return out;
}

}  // namespace vismoe
