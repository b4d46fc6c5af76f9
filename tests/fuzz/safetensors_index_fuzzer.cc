// Fuzzes the sharded checkpoint index reader (engine/model/checkpoint.h): the
// input is written as model.safetensors.index.json into a scratch directory
// that holds the tiny-qwen3-vl-moe fixture's two shards (symlinked) and a few
// small shards made here, and Checkpoint::Open reads it; every tensor of a
// checkpoint that opens is looked up.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/string_view.h"
#include "engine/model/checkpoint.h"
#include "spdlog/spdlog.h"

namespace vismoe {
namespace {

namespace fs = std::filesystem;

void WriteFile(const fs::path& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// A safetensors file with `header` (padded to 8 bytes) and `data_bytes` zero bytes.
std::string Safetensors(std::string header, size_t data_bytes) {
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + std::string(data_bytes, '\0');
}

// The scratch directory, made once per process and removed at exit.
const fs::path& Dir() {
  static const fs::path* const dir = [] {
    char tmpl[] = "/tmp/vismoe_index_fuzz.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    auto* d = new fs::path(tmpl);
    const fs::path fixture = fs::path(VISMOE_FIXTURES_DIR) / "tiny-qwen3-vl-moe";
    for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      fs::create_symlink(fixture / shard, *d / shard);
    }
    WriteFile(*d / "a.safetensors",
              Safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("y":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}})",
                          10));
    WriteFile(*d / "b.safetensors",
              Safetensors(R"({"__metadata__":{"format":"pt"},)"
                          R"("z":{"dtype":"F16","shape":[2,1],"data_offsets":[0,4]},)"
                          R"("y":{"dtype":"I8","shape":[1],"data_offsets":[4,5]}})",
                          5));
    WriteFile(*d / "empty.safetensors", Safetensors("{}", 0));
    WriteFile(*d / "bad.safetensors", "not a safetensors file");
    fs::create_directory(*d / "dir.safetensors");
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(Dir(), ec);
    });
    return d;
  }();
  return *dir;
}

void Fuzz(absl::string_view index) {
  WriteFile(Dir() / Checkpoint::kIndexFile, index);
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(Dir().string());
  if (!ckpt.ok()) return;
  for (const std::string& name : (*ckpt)->Names()) {
    if (!(*ckpt)->Has(name)) std::abort();
    (void)(*ckpt)->Get(name);
  }
}

}  // namespace
}  // namespace vismoe

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // "tensors not listed" warnings
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::Fuzz(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
