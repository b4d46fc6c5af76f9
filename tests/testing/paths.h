// Where tests find the committed fixtures and the built binaries.
#ifndef VISMOE_TESTS_TESTING_PATHS_H_
#define VISMOE_TESTS_TESTING_PATHS_H_

#include <cstdlib>
#include <string>

namespace vismoe::testing {

// tests/fixtures in the source tree.
// The environment variable VISMOE_FIXTURES_DIR overrides the compiled-in path
// (test binaries carried to another machine, tests/gpu/run_bundle.sh).
inline std::string FixturesDir() {
  const char* env = std::getenv("VISMOE_FIXTURES_DIR");
  return env != nullptr && *env != '\0' ? env : VISMOE_FIXTURES_DIR;
}
// The tiny Qwen3-VL-MoE checkpoint made by tests/fixtures/make_fixtures.py.
inline std::string TinyModelDir() { return FixturesDir() + "/tiny-qwen3-vl-moe"; }
// Top of the build tree (binaries: server/vismoe-server, client/vismoe-cli, ...).
inline std::string BinaryDir() { return VISMOE_BINARY_DIR; }

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_PATHS_H_
