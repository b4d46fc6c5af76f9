// vismoe-bench-lite's PNG reader (engine/bench/image_loader_png.cc, libpng)
// gives the pixels the server's OpenCV decoder gives -- gray, RGBA and RGB
// files and every picture of the VQA eval set -- and refuses what it cannot
// read the same way, naming the file.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/bench/request_set.h"
#include "gtest/gtest.h"
#include "tests/testing/image_file.h"
#include "tests/testing/paths.h"

namespace vismoe::bench {
namespace {

void ExpectSamePixels(const std::string& path) {
  SCOPED_TRACE(path);
  auto png = LoadImage(path);
  ASSERT_TRUE(png.ok()) << png.status();
  auto cv = testing::LoadImageFile(path);
  ASSERT_TRUE(cv.ok()) << cv.status();
  EXPECT_EQ(png->width, cv->width);
  EXPECT_EQ(png->height, cv->height);
  EXPECT_TRUE(png->pixels == cv->pixels);
}

std::string Golden(const std::string& name) {
  return testing::FixturesDir() + "/golden/images/" + name;
}

TEST(ImageLoaderPngTest, SamePixelsAsTheServersDecoder) {
  for (const char* name :
       {"gray_150x200.png", "rgba_180x120.png", "odd_301x217.png", "tiny_20x13.png"}) {
    ExpectSamePixels(Golden(name));
  }
  int eval = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(testing::FixturesDir() + "/vqa-eval/img")) {
    ExpectSamePixels(e.path().string());
    ++eval;
  }
  EXPECT_GT(eval, 200);
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ImageLoaderPngTest, RefusesWhatItCannotReadAlike) {
  auto jpeg = LoadImage(Golden("demo.jpg"));
  EXPECT_EQ(jpeg.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(jpeg.status().message().find("PNG only"), std::string::npos) << jpeg.status();

  const std::string png = Read(Golden("tiny_20x13.png"));
  const std::string cut = Write("cut.png", png.substr(0, png.size() / 2));
  auto truncated = LoadImage(cut);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument) << truncated.status();
  EXPECT_NE(truncated.status().message().find(cut), std::string::npos);

  // A gAMA chunk right after IHDR (8-byte signature + 25-byte IHDR chunk).
  std::string gama = png.substr(0, 33);
  const unsigned char chunk[] = {0, 0, 0,    4,    'g',  'A',  'M',  'A',
                                 0, 0, 0xb1, 0x8f, 0x0b, 0xfc, 0x61, 0x05};
  gama.append(reinterpret_cast<const char*>(chunk), sizeof(chunk));
  gama += png.substr(33);
  auto with_gamma = LoadImage(Write("gamma.png", gama));
  EXPECT_EQ(with_gamma.status().code(), absl::StatusCode::kUnimplemented) << with_gamma.status();
  EXPECT_NE(with_gamma.status().message().find("gamma"), std::string::npos);

  EXPECT_EQ(LoadImage(::testing::TempDir() + "/absent.png").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace vismoe::bench
