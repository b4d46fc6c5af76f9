// Unit tests of the image preprocessor: smart_resize against values computed
// with transformers' smart_resize, config parsing, patch order and
// normalisation, the resampler, and input validation.
#include "engine/model/image_preprocessor.h"

#include <cstdint>
#include <vector>

#include "engine/model/image_resize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

struct ResizeCase {
  int h, w;
  int64_t min_pixels, max_pixels;
  int want_h, want_w;
};

TEST(SmartResizeTest, MatchesTransformers) {
  // Expected values from transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize
  // with factor 32.
  const ResizeCase cases[] = {
      {150, 420, 65536, 262144, 160, 416},   {500, 260, 65536, 262144, 512, 256},
      {40, 60, 65536, 262144, 224, 320},     {700, 900, 65536, 262144, 448, 576},
      {700, 900, 65536, 16777216, 704, 896}, {48, 80, 65536, 262144, 224, 352},
      {16, 3000, 65536, 262144, 32, 3520},   {1000, 1000, 65536, 262144, 512, 512},
      {4000, 3000, 65536, 262144, 576, 416}, {4000, 3000, 65536, 16777216, 4000, 3008},
      {1, 200, 65536, 262144, 32, 3648},     {48, 80, 1024, 1 << 30, 64, 64},  // 1.5, 2.5 -> 2
      {80, 112, 1024, 1 << 30, 64, 128},     {47, 49, 1024, 1 << 30, 32, 64},
      {100, 3, 1024, 1 << 30, 192, 32},
  };
  for (const ResizeCase& c : cases) {
    auto r = SmartResize(c.h, c.w, 32, c.min_pixels, c.max_pixels);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->first, c.want_h) << c.h << "x" << c.w;
    EXPECT_EQ(r->second, c.want_w) << c.h << "x" << c.w;
  }
}

TEST(SmartResizeTest, RejectsBadShapes) {
  EXPECT_THAT(SmartResize(0, 10, 32, 1024, 1 << 20).status().message(),
              HasSubstr("smaller than 1"));
  EXPECT_THAT(SmartResize(1, 201, 32, 1024, 1 << 20).status().message(), HasSubstr("aspect ratio"));
  EXPECT_TRUE(SmartResize(1, 200, 32, 1024, 1 << 20).ok());
}

TEST(PreprocessorConfigTest, ParsesTopLevelAndNestedForms) {
  auto top = PreprocessorConfig::Parse(R"({"size": {"shortest_edge": 100, "longest_edge": 900},
      "patch_size": 16, "image_mean": [0.5, 0.5, 0.5], "image_std": 0.25})");
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->patch_size, 16);
  EXPECT_EQ(top->min_pixels, 100);
  EXPECT_EQ(top->max_pixels, 900);
  EXPECT_FLOAT_EQ(top->image_std[2], 0.25f);
  EXPECT_EQ(top->resample, 3);  // class default

  auto nested = PreprocessorConfig::Parse(
      R"({"image_processor": {"patch_size": 14, "min_pixels": 10, "max_pixels": 20,
          "size": {"shortest_edge": 1, "longest_edge": 2}}})");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->patch_size, 14);
  EXPECT_EQ(nested->min_pixels, 10);  // top-level min/max_pixels override size
  EXPECT_EQ(nested->max_pixels, 20);
}

TEST(PreprocessorConfigTest, RejectsBadFields) {
  EXPECT_THAT(PreprocessorConfig::Parse("[1]").status().message(), HasSubstr("JSON object"));
  EXPECT_THAT(PreprocessorConfig::Parse(R"({"patch_size": 0})").status().message(),
              HasSubstr("patch_size"));
  EXPECT_THAT(PreprocessorConfig::Parse(R"({"patch_size": "16"})").status().message(),
              HasSubstr("patch_size"));
  EXPECT_THAT(PreprocessorConfig::Parse(R"({"resample": 2})").status().message(),
              HasSubstr("resample"));
  EXPECT_THAT(PreprocessorConfig::Parse(R"({"image_std": [0.5, 0, 0.5]})").status().message(),
              HasSubstr("image_std"));
  EXPECT_THAT(PreprocessorConfig::Parse(R"({"min_pixels": 9, "max_pixels": 8})").status().message(),
              HasSubstr("min_pixels"));
  EXPECT_FALSE(PreprocessorConfig::Load("/nonexistent-dir").ok());
}

TEST(PreprocessorConfigTest, LoadsTinyModel) {
  auto c = PreprocessorConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->patch_size, 16);
  EXPECT_EQ(c->merge_size, 2);
  EXPECT_EQ(c->temporal_patch_size, 2);
  EXPECT_FLOAT_EQ(c->image_mean[0], 0.5f);
}

PreprocessorConfig SmallConfig() {
  PreprocessorConfig c;
  c.patch_size = 2;
  c.merge_size = 2;
  c.temporal_patch_size = 2;
  c.min_pixels = 16;
  c.max_pixels = 1 << 20;
  c.image_mean = {0.5f, 0.5f, 0.5f};
  c.image_std = {0.5f, 0.5f, 0.5f};
  return c;
}

TEST(ImagePreprocessorTest, PatchifyOrderAndNormalisation) {
  // 8x4 image (w=8, h=4) is already a multiple of factor 4: no resize.
  RgbImage img;
  img.width = 8;
  img.height = 4;
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 8; ++x) {
      for (int c = 0; c < 3; ++c) img.pixels.push_back(static_cast<uint8_t>(y * 40 + x * 3 + c));
    }
  }
  auto pp = ImagePreprocessor::FromConfig(SmallConfig());
  ASSERT_TRUE(pp.ok());
  auto out = pp->Process(img);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->grid, (GridThw{1, 2, 4}));
  ASSERT_EQ(pp->patch_dim(), 24);
  ASSERT_EQ(out->patches.size(), 8u * 24u);
  auto value = [&](int y, int x, int c) {
    return (static_cast<float>(img.pixels[(y * 8 + x) * 3 + c]) - 127.5f) / 127.5f;
  };
  // Rows in (bh, bw, mh, mw) order; columns (c, t, py, px).
  int row = 0;
  for (int bw = 0; bw < 2; ++bw) {
    for (int mh = 0; mh < 2; ++mh) {
      for (int mw = 0; mw < 2; ++mw, ++row) {
        const int y0 = mh * 2;
        const int x0 = (bw * 2 + mw) * 2;
        for (int c = 0; c < 3; ++c) {
          for (int t = 0; t < 2; ++t) {
            for (int py = 0; py < 2; ++py) {
              for (int px = 0; px < 2; ++px) {
                const int col = ((c * 2 + t) * 2 + py) * 2 + px;
                EXPECT_FLOAT_EQ(out->patches[row * 24 + col], value(y0 + py, x0 + px, c))
                    << "row " << row << " col " << col;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ImagePreprocessorTest, RejectsBadInputs) {
  PreprocessOptions opts;
  opts.max_input_pixels = 1000;
  auto pp = ImagePreprocessor::FromConfig(SmallConfig(), opts);
  ASSERT_TRUE(pp.ok());
  RgbImage img;
  img.width = 10;
  img.height = 10;
  img.pixels.assign(10 * 10 * 3 - 1, 0);  // one byte short
  EXPECT_THAT(pp->Process(img).status().message(), HasSubstr("expected"));
  img.pixels.assign(10 * 10 * 4, 0);  // RGBA-sized buffer
  EXPECT_EQ(pp->Process(img).status().code(), absl::StatusCode::kInvalidArgument);
  img.pixels.assign(300, 0);
  EXPECT_TRUE(pp->Process(img).ok());
  RgbImage empty;
  EXPECT_THAT(pp->Process(empty).status().message(), HasSubstr("empty"));
  RgbImage big;
  big.width = 100;
  big.height = 11;
  big.pixels.assign(100 * 11 * 3, 0);
  EXPECT_THAT(pp->Process(big).status().message(), HasSubstr("limit"));
  RgbImage thin;
  thin.width = 201;
  thin.height = 1;
  thin.pixels.assign(201 * 3, 0);
  EXPECT_THAT(pp->Process(thin).status().message(), HasSubstr("aspect ratio"));
  EXPECT_FALSE(ImagePreprocessor::FromConfig(SmallConfig(), PreprocessOptions{0}).ok());
}

TEST(ImageResizeTest, KernelAndConstantImage) {
  EXPECT_DOUBLE_EQ(BicubicKernel(0.0), 1.0);
  EXPECT_DOUBLE_EQ(BicubicKernel(1.0), 0.0);
  EXPECT_DOUBLE_EQ(BicubicKernel(2.5), 0.0);
  EXPECT_DOUBLE_EQ(BicubicKernel(0.5), 0.5625);   // (1.5*0.5 - 2.5)*0.25 + 1
  EXPECT_DOUBLE_EQ(BicubicKernel(1.5), -0.0625);  // a = -0.5
  // A constant image stays constant whatever the scale (weights sum to 1).
  std::vector<uint8_t> src(13 * 7 * 3, 77);
  for (auto [oh, ow] : {std::pair{3, 5}, std::pair{20, 40}, std::pair{13, 2}}) {
    std::vector<uint8_t> dst = ResizeBicubicAntialias(src.data(), 13, 7, 3, oh, ow);
    ASSERT_EQ(dst.size(), static_cast<size_t>(oh * ow * 3));
    for (uint8_t v : dst) ASSERT_EQ(v, 77);
  }
}

TEST(ImageResizeTest, MatchesTorchOnSmallImages) {
  // Expected: torchvision resize(BICUBIC, antialias=True) of these uint8 images.
  const std::vector<uint8_t> ramp = {0, 30, 60, 90, 120, 150, 180, 210};
  EXPECT_EQ(ResizeBicubicAntialias(ramp.data(), 1, 8, 1, 1, 3),
            (std::vector<uint8_t>{27, 105, 183}));  // downscale (antialiased)
  const std::vector<uint8_t> two_rows = {0, 30, 60, 90, 250, 150, 180, 210};
  EXPECT_EQ(ResizeBicubicAntialias(two_rows.data(), 2, 4, 1, 3, 7),
            (std::vector<uint8_t>{0,   0,   20,  38,  54,  74,  84,  128, 114, 91, 101,
                                  122, 142, 152, 255, 233, 162, 164, 190, 210, 220}));
}

// Images on which the fixed point decides a level: an fp64 filter gives 126
// where torch's int16 weights give 125 (7th value), and 175 where Pillow's
// 22-bit weights give 176 (6th value); and one where Pillow (>= 13.0) runs
// the vertical pass first because the height shrinks by more than twice as
// many pixels as the width. Expected values from torchvision 0.29 /
// Pillow 13.0 on these very arrays.
TEST(ImageResizeTest, FixedPointAndPassOrderAsTorchAndPillow) {
  const std::vector<uint8_t> torch_in = {144, 184, 24,  38, 129, 1,   202, 255, 85,  54, 228,
                                         48,  127, 169, 1,  167, 109, 247, 16,  192, 78};
  EXPECT_EQ(ResizeBicubicAntialias(torch_in.data(), 3, 7, 1, 5, 4),
            (std::vector<uint8_t>{162, 52,  69,  112, 171, 71,  87, 125, 172, 106,
                                  116, 144, 107, 148, 119, 131, 63, 173, 118, 120}));
  const std::vector<uint8_t> pillow_in = {223, 185, 254, 13, 119, 192, 72, 127, 226, 132, 183,
                                          8,   85,  224, 4,  49,  7,   65, 140, 216, 177};
  const std::vector<uint8_t> pillow_out = {217, 168, 101, 129, 205, 176, 83, 138, 170, 171,
                                           64,  156, 72,  78,  109, 184, 11, 16,  140, 201};
  EXPECT_EQ(ResizeBicubicPillow(pillow_in.data(), 3, 7, 1, 5, 4), pillow_out);
  std::vector<uint8_t> torch_out = pillow_out;
  torch_out[5] = 175;
  EXPECT_EQ(ResizeBicubicAntialias(pillow_in.data(), 3, 7, 1, 5, 4), torch_out);
  const std::vector<uint8_t> tall = {78,  204, 64,  34,  16,  250, 233, 32,  103, 122, 13,  204,
                                     138, 172, 208, 127, 124, 100, 12,  151, 222, 203, 251, 153,
                                     211, 235, 80,  182, 176, 41,  88,  7,   141, 241, 73,  124};
  EXPECT_EQ(ResizeBicubicPillow(tall.data(), 9, 4, 1, 2, 3),
            (std::vector<uint8_t>{119, 153, 114, 181, 136, 119}));
  // The same weights horizontal first (as torch orders its passes) differ.
  EXPECT_NE(ResizeBicubicAntialias(tall.data(), 9, 4, 1, 2, 3),
            (std::vector<uint8_t>{119, 153, 114, 181, 136, 119}));
}

}  // namespace
}  // namespace vismoe
