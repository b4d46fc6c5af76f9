// The engine's includes run one way: a file under engine/<layer>/ includes
// engine headers of its own layer or of layers below it only, in the order
// engine/CMakeLists.txt writes down. Reads the source tree itself, so a new
// include against the order fails here, naming the file and the include.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

namespace fs = std::filesystem;

// engine/CMakeLists.txt's order, lowest first.
const std::vector<std::string> kLayers = {"core",    "model",     "offload", "device", "ops",
                                          "backend", "backends",  "arch",    "policy", "api",
                                          "runtime", "calibrate", "bench",   "tools"};

int LayerOf(const std::string& dir) {
  for (size_t i = 0; i < kLayers.size(); ++i) {
    if (kLayers[i] == dir) return static_cast<int>(i);
  }
  return -1;
}

fs::path SourceRoot() { return fs::path(testing::FixturesDir()).parent_path().parent_path(); }

// "engine/<layer>/..." includes of one file, as layer names.
std::vector<std::string> EngineIncludes(const fs::path& file) {
  std::vector<std::string> out;
  std::ifstream in(file);
  std::string line;
  const std::string prefix = "#include \"engine/";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string rest = line.substr(prefix.size());
    out.push_back(rest.substr(0, rest.find('/')));
  }
  return out;
}

TEST(IncludeLayersTest, EveryEngineIncludeRunsDown) {
  const fs::path engine = SourceRoot() / "engine";
  ASSERT_TRUE(fs::is_directory(engine)) << engine;
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(engine)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
    const std::string dir = fs::relative(entry.path(), engine).begin()->string();
    const int layer = LayerOf(dir);
    ASSERT_GE(layer, 0) << "engine/" << dir << " is in no layer of engine/CMakeLists.txt";
    ++files;
    for (const std::string& inc : EngineIncludes(entry.path())) {
      const int to = LayerOf(inc);
      EXPECT_GE(to, 0) << entry.path() << " includes engine/" << inc << "/, which is no layer";
      EXPECT_LE(to, layer) << fs::relative(entry.path(), SourceRoot()) << " (layer " << dir
                           << ") includes engine/" << inc << "/, a layer above it";
    }
  }
  EXPECT_GT(files, 100);  // the walk found the engine
}

// The order is written once, in engine/CMakeLists.txt: this copy must agree.
TEST(IncludeLayersTest, OrderMatchesCMakeLists) {
  std::ifstream in(SourceRoot() / "engine" / "CMakeLists.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string joined;
  for (const std::string& l : kLayers) joined += joined.empty() ? l : " < " + l;
  // The comment may wrap: "\n#" and the indentation after it read as one space.
  std::string flat;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' && i + 1 < text.size() && text[i + 1] == '#') {
      ++i;
      while (i + 1 < text.size() && text[i + 1] == ' ') ++i;
      flat += ' ';
    } else {
      flat += text[i];
    }
  }
  EXPECT_NE(flat.find(joined), std::string::npos)
      << "engine/CMakeLists.txt does not list " << joined;
}

}  // namespace
}  // namespace vismoe

namespace vismoe {
namespace {

// The server and the client see the engine through engine/api/ only (and the
// dependency-free utilities of engine/core/).
TEST(IncludeLayersTest, ServerAndClientIncludeOnlyTheApi) {
  for (const char* top : {"server", "client"}) {
    const fs::path dir = SourceRoot() / top;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc") continue;
      for (const std::string& inc : EngineIncludes(entry.path())) {
        EXPECT_TRUE(inc == "api" || inc == "core")
            << fs::relative(entry.path(), SourceRoot()) << " includes engine/" << inc << "/";
      }
    }
  }
}

}  // namespace
}  // namespace vismoe
