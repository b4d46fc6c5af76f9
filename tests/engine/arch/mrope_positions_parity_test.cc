// Parity of ComputeMropePositions (and ExpandImagePads) with transformers'
// get_rope_index on the golden multimodal prompts (golden/mm_cases.json, image
// grids from golden/images.json).
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "engine/arch/mrope_positions.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

std::string GoldenDir() {
  const char* env = std::getenv("VISMOE_GOLDEN_DIR");  // to check regenerated goldens
  return env != nullptr ? env : testing::FixturesDir() + "/golden";
}

TEST(MropePositionsParityTest, MatchesGetRopeIndex) {
  auto config = ModelConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  const nlohmann::json images = testing::ReadJsonFile(GoldenDir() + "/images.json");
  const nlohmann::json cases = testing::ReadJsonFile(GoldenDir() + "/mm_cases.json");
  ASSERT_TRUE(images.is_array() && cases.is_array() && !cases.empty())
      << "missing or malformed goldens in " << GoldenDir();
  absl::flat_hash_map<std::string, GridThw> grid_of;
  for (const auto& im : images) {
    const auto& g = im["grid_thw"];
    grid_of[im["name"].get<std::string>()] =
        GridThw{g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()};
  }
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<GridThw> grids;
    for (const auto& n : c["image_names"]) grids.push_back(grid_of.at(n.get<std::string>()));
    const std::vector<int> ids = c["input_ids"].get<std::vector<int>>();
    auto r = ComputeMropePositions(ids, grids, *config);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int64_t> want;
    for (const auto& axis : c["position_ids"]) {
      for (const auto& p : axis) want.push_back(p.get<int64_t>());
    }
    EXPECT_EQ(r->positions, want);
    EXPECT_EQ(r->rope_delta, c["rope_delta"].get<int64_t>());

    // Collapsing each pad run to one placeholder and expanding gives the ids back.
    std::vector<int> collapsed;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == config->image_token_id && i > 0 && ids[i - 1] == config->image_token_id) {
        continue;
      }
      collapsed.push_back(ids[i]);
    }
    auto expanded = ExpandImagePads(collapsed, grids, *config);
    ASSERT_TRUE(expanded.ok()) << expanded.status();
    EXPECT_EQ(*expanded, ids);
  }
}

}  // namespace
}  // namespace vismoe
