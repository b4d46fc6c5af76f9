#include "engine/model/safetensors_file.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/safetensors_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory per test under the gtest temp dir.
std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string leaf = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : leaf) {
    if (c == '/') c = '_';  // parameterized names contain '/'
  }
  const std::string dir = ::testing::TempDir() + "safetensors_file_test/" + leaf;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string LengthPrefix(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A raw file: `header` (padded with spaces to a multiple of 8 bytes, so that
// tensors are aligned, unless `pad` is false) followed by `data_bytes` zero bytes.
void WriteRaw(const std::string& path, std::string header, size_t data_bytes, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  WriteBytes(path, LengthPrefix(header.size()) + header + std::string(data_bytes, '\0'));
}

TEST(SafetensorsFileTest, RoundTripF32F16Bf16) {
  const std::string path = TestDir() + "/t.safetensors";
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<uint16_t> f16 = {FloatToF16(0.5f), FloatToF16(-1.0f), FloatToF16(2.0f)};
  // Odd element count so that a naive layout would misalign the F32 tensor after it.
  const std::vector<uint16_t> bf16 = {FloatToBf16(1.0f), FloatToBf16(-3.0f), FloatToBf16(0.25f)};
  const float scalar = 42.0f;
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"b.bf16", {bf16.data(), DType::kBF16, {3}}},
                                {"a.f32", {f32.data(), DType::kF32, {2, 3}}},
                                {"c.f16", {f16.data(), DType::kF16, {3, 1}}},
                                {"d.scalar", {&scalar, DType::kF32, {}}},
                                {"e.empty", {nullptr, DType::kBF16, {0, 5}}}},
                               {{"format", "pt"}, {"note", "round trip"}})
                  .ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& st = **file;
  EXPECT_THAT(st.names(), ElementsAre("a.f32", "b.bf16", "c.f16", "d.scalar", "e.empty"));
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("note"), "round trip");

  const TensorView* a = st.Find("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(a->data, f32.data(), a->nbytes()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 4, 0u);

  auto b = st.Get("b.bf16");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype, DType::kBF16);
  std::vector<float> widened(3);
  ToFloat(b->dtype, b->data, 3, widened.data());
  EXPECT_THAT(widened, ElementsAre(1.0f, -3.0f, 0.25f));

  const TensorView* c = st.Find("c.f16");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->shape, (Shape{3, 1}));
  ToFloat(c->dtype, c->data, 3, widened.data());
  EXPECT_THAT(widened, ElementsAre(0.5f, -1.0f, 2.0f));

  const TensorView* d = st.Find("d.scalar");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->rank(), 0);
  float got;
  std::memcpy(&got, d->data, sizeof(got));
  EXPECT_EQ(got, 42.0f);

  const TensorView* e = st.Find("e.empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->numel(), 0);

  EXPECT_EQ(st.Find("missing"), nullptr);
  EXPECT_EQ(st.Get("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.Get("missing").status().message()),
              HasSubstr("tensor 'missing' not found"));
}

TEST(SafetensorsFileTest, FromBytesReadsWhatOpenReads) {
  const std::string path = TestDir() + "/t.safetensors";
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f};
  const std::vector<uint16_t> bf16 = {FloatToBf16(1.0f), FloatToBf16(-3.0f), FloatToBf16(0.25f)};
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"b", {bf16.data(), DType::kBF16, {3}}},
                                {"a", {f32.data(), DType::kF32, {3}}}},
                               {{"format", "pt"}})
                  .ok());
  auto file = SafetensorsFile::FromBytes("in-memory", ReadBytes(path));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), "in-memory");
  EXPECT_THAT((*file)->names(), ElementsAre("a", "b"));
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const TensorView* a = (*file)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(std::memcmp(a->data, f32.data(), a->nbytes()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 4, 0u);
  EXPECT_THAT(std::string(SafetensorsFile::FromBytes("x", "short").status().message()),
              HasSubstr("x: file is 5 bytes, too short"));
}

TEST(SafetensorsFileTest, EmptyHeaderObjectIsAValidEmptyFile) {
  const std::string path = TestDir() + "/empty.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->names().empty());
  EXPECT_TRUE((*file)->metadata().empty());
}

TEST(SafetensorsFileTest, UnsupportedDtypeOpensButCannotBeRead) {
  const std::string path = TestDir() + "/ids.safetensors";
  WriteRaw(path,
           R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
           R"("w":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
           24);
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->Contains("ids"));
  EXPECT_EQ((*file)->Find("ids"), nullptr);
  const absl::Status s = (*file)->Get("ids").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensor 'ids' has dtype I64"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not supported"));
  EXPECT_NE((*file)->Find("w"), nullptr);
}

TEST(SafetensorsFileTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open(TestDir() + "/nope.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("nope.safetensors"));
}

TEST(SafetensorsFileTest, DirectoryIsRejected) {
  auto file = SafetensorsFile::Open(TestDir());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("not a regular file"));
}

void ExpectInvalid(const std::string& path, const std::string& substring) {
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok()) << path << " opened but should fail with: " << substring;
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(substring));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
  // The in-memory entry point runs the same checks.
  EXPECT_EQ(SafetensorsFile::FromBytes(path, ReadBytes(path)).status(), file.status());
}

TEST(SafetensorsFileTest, RejectsEmptyAndShortFiles) {
  const std::string dir = TestDir();
  WriteBytes(dir + "/empty.safetensors", "");
  ExpectInvalid(dir + "/empty.safetensors", "file is 0 bytes, too short");
  WriteBytes(dir + "/short.safetensors", std::string("\x02\0\0\0\0", 5));
  ExpectInvalid(dir + "/short.safetensors", "file is 5 bytes, too short");
}

TEST(SafetensorsFileTest, RejectsBadHeaderLengths) {
  const std::string dir = TestDir();
  WriteBytes(dir + "/past_end.safetensors", LengthPrefix(1000) + "{}        ");
  ExpectInvalid(dir + "/past_end.safetensors", "header length 1000 runs past the end");
  WriteBytes(dir + "/huge.safetensors", LengthPrefix(uint64_t{1} << 40) + "{}");
  ExpectInvalid(dir + "/huge.safetensors", "exceeds the 100000000-byte limit");
  WriteBytes(dir + "/max.safetensors", LengthPrefix(~uint64_t{0}) + "{}");
  ExpectInvalid(dir + "/max.safetensors", "exceeds the 100000000-byte limit");
}

struct MalformedCase {
  const char* name;
  std::string header;
  size_t data_bytes;
  const char* error;
};

class MalformedHeaderTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedHeaderTest, FailsWithClearError) {
  const MalformedCase& c = GetParam();
  const std::string path = TestDir() + "/bad.safetensors";
  WriteRaw(path, c.header, c.data_bytes);
  ExpectInvalid(path, c.error);
}

// F32 [2] described with the given offsets.
std::string F32Pair(const char* name, int begin, int end) {
  return std::string("\"") + name + R"(":{"dtype":"F32","shape":[2],"data_offsets":[)" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

INSTANTIATE_TEST_SUITE_P(
    All, MalformedHeaderTest,
    ::testing::Values(
        MalformedCase{"NotJson", "{\"a\": nope", 0, "header is not valid JSON"},
        MalformedCase{"NotUtf8", "{\"\xff\xfe\":1}", 0, "header is not valid JSON"},
        MalformedCase{"JsonArray", "[1, 2, 3]", 0, "header is not a JSON object (got array)"},
        MalformedCase{"EntryNotObject", R"({"w": 5})", 0, "tensor 'w': description is not"},
        MalformedCase{"UnknownDtype", R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1,
                      "tensor 'w': unknown dtype 'Q7'"},
        MalformedCase{"PartialByte", R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
                      "3 elements of F4 do not fill whole bytes"},
        MalformedCase{"MissingDtype", R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4,
                      "missing or non-string \"dtype\""},
        MalformedCase{"NegativeDim", R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,0]}})",
                      0, "tensor 'w': shape has negative dimension -3"},
        MalformedCase{"FractionalDim",
                      R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
                      "shape entry 1.5 is not an integer"},
        MalformedCase{"ShapeOverflow",
                      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],)"
                      R"("data_offsets":[0,4]}})",
                      4, "overflows"},
        MalformedCase{"MissingOffsets", R"({"w":{"dtype":"F32","shape":[1]}})", 4,
                      "\"data_offsets\" must be two non-negative integers"},
        MalformedCase{"NegativeOffset", "{" + F32Pair("w", -8, 0) + "}", 8,
                      "\"data_offsets\" must be two non-negative integers"},
        MalformedCase{"BeginAfterEnd", "{" + F32Pair("w", 8, 0) + "}", 8, "have begin > end"},
        MalformedCase{"OffsetsOutOfRange", "{" + F32Pair("w", 8, 16) + "}", 8,
                      "data_offsets [8, 16] exceed the data section of 8 bytes"},
        MalformedCase{"TruncatedData",
                      R"({"w":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]}})", 20,
                      "exceed the data section of 20 bytes (file truncated?)"},
        MalformedCase{"SizeMismatch", "{" + F32Pair("w", 0, 12) + "}", 12,
                      "span 12 bytes but shape [2] of F32 needs 8"},
        MalformedCase{"Overlap", "{" + F32Pair("a", 0, 8) + "," + F32Pair("b", 4, 12) + "}", 12,
                      "tensor 'b': data_offsets [4, 12] overlap tensor 'a'"},
        MalformedCase{"Hole", "{" + F32Pair("a", 0, 8) + "," + F32Pair("b", 12, 20) + "}", 20,
                      "4 unused bytes before tensor 'b'"},
        MalformedCase{"TrailingBytes", "{" + F32Pair("a", 0, 8) + "}", 12,
                      "4 trailing bytes not covered"},
        MalformedCase{"MetadataNotObject", R"({"__metadata__":[1]})", 0,
                      "__metadata__ is not a JSON object"},
        MalformedCase{"MetadataNotString", R"({"__metadata__":{"k":1}})", 0,
                      "__metadata__ value for 'k' is not a string"}),
    [](const ::testing::TestParamInfo<MalformedCase>& info) { return info.param.name; });

TEST(SafetensorsFileTest, RejectsMisalignedTensor) {
  const std::string path = TestDir() + "/misaligned.safetensors";
  std::string header = "{" + F32Pair("w", 0, 8) + "}";
  header.append((8 - header.size() % 8) % 8 + 2, ' ');  // data starts at 2 mod 8
  WriteRaw(path, header, 8, /*pad=*/false);
  ExpectInvalid(path, absl::StrCat("tensor 'w': F32 data starts at file offset ", 8 + header.size(),
                                   ", not a multiple of 4"));

  // A BF16 tensor at the same offset is 2-byte aligned and therefore fine.
  std::string bf16 = R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})";
  bf16.append((8 - bf16.size() % 8) % 8 + 2, ' ');
  WriteRaw(path, bf16, 8, /*pad=*/false);
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*file)->Find("w")->data) % 2, 0u);
}

TEST(SafetensorsWriterTest, RejectsBadInput) {
  const std::string path = TestDir() + "/w.safetensors";
  const float x[2] = {1, 2};
  const TensorView v{x, DType::kF32, {2}};
  absl::Status s = WriteSafetensors(path, {{"a", v}, {"a", v}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("duplicate tensor name 'a'"));
  s = WriteSafetensors(path, {{"__metadata__", v}});
  EXPECT_THAT(std::string(s.message()), HasSubstr("invalid tensor name '__metadata__'"));
  s = WriteSafetensors(path, {{"n", {nullptr, DType::kF32, {2}}}});
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensor 'n' has no data"));
  s = WriteSafetensors(path, {{"bad\xff", v}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot encode header"));
  EXPECT_FALSE(std::filesystem::exists(path));
  s = WriteSafetensors(TestDir() + "/no/such/dir/w.safetensors", {{"a", v}});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("no/such/dir"));
}

TEST(SafetensorsWriterTest, HeaderIsPaddedToEightBytes) {
  const std::string path = TestDir() + "/w.safetensors";
  const uint16_t x = FloatToBf16(1.0f);
  ASSERT_TRUE(WriteSafetensors(path, {{"odd", {&x, DType::kBF16, {1}}}}).ok());
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 8 + n + 2);
}

}  // namespace
}  // namespace vismoe
