// Parity of the image preprocessor with the transformers processor the
// fixtures were made with (golden/images.json names its class): each golden
// image file is decoded, converted to RGB as transformers' convert_to_rgb does, and
// its patches compared with golden/pixel_values.safetensors (stored F16):
// equal but for the F16 rounding.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/model/image_preprocessor.h"
#include "engine/model/safetensors_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/image_file.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

std::string GoldenDir() {
  const char* env = std::getenv("VISMOE_GOLDEN_DIR");  // to check regenerated goldens
  return env != nullptr ? env : testing::FixturesDir() + "/golden";
}

RgbImage LoadRgb(const std::string& path) {
  auto img = testing::LoadImageFile(path);
  return img.ok() ? *std::move(img) : RgbImage{};
}

TEST(ImagePreprocessorParityTest, MatchesTransformersPixelValues) {
  std::ifstream in(GoldenDir() + "/images.json");
  ASSERT_TRUE(in) << "missing " << GoldenDir() << "/images.json";
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json cases = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  auto golden = SafetensorsFile::Open(GoldenDir() + "/pixel_values.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto pp = ImagePreprocessor::Create(testing::TinyModelDir());
  ASSERT_TRUE(pp.ok()) << pp.status();

  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const RgbImage img = LoadRgb(GoldenDir() + "/images/" + c["file"].get<std::string>());
    ASSERT_GT(img.width, 0) << "cannot decode " << c["file"];
    auto out = pp->Process(img);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->resized_height, c["resized_height"].get<int>());
    EXPECT_EQ(out->resized_width, c["resized_width"].get<int>());
    const auto g = c["grid_thw"];
    ASSERT_EQ(out->grid, (GridThw{g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()}));

    auto ref = (*golden)->Get(name);
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_EQ(ref->shape, (Shape{out->grid.num_patches(), pp->patch_dim()}));
    std::vector<float> want(static_cast<size_t>(ref->numel()));
    ToFloat(ref->dtype, ref->data, want.size(), want.data());
    ASSERT_EQ(want.size(), out->patches.size());
    double sum = 0.0;
    double max_diff = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = std::fabs(static_cast<double>(want[i]) - out->patches[i]);
      sum += d;
      max_diff = std::max(max_diff, d);
    }
    const double mean = sum / static_cast<double>(want.size());
    // Equal up to the goldens' F16 rounding (half a step is 4.9e-4 below
    // 2.0): torch's fixed-point resize is reproduced bit for bit, and one
    // pixel level would be ~0.015 here.
    EXPECT_LE(mean, 2e-4);
    EXPECT_LE(max_diff, 4.9e-4);
    std::printf("%s: %zu values, mean |diff| %.3g, max |diff| %.3g\n", name.c_str(), want.size(),
                mean, max_diff);
  }
}

}  // namespace
}  // namespace vismoe
