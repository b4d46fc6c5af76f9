// UTF-8 repair follows Rust's from_utf8_lossy (one U+FFFD per maximal invalid
// subpart), and the GPT-2 byte table is a bijection with the known anchors.
#include "engine/model/utf8.h"

#include <set>
#include <string>

#include "engine/model/byte_level.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

const std::string kR = "\xEF\xBF\xBD";

TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::Lossy("plain ascii"), "plain ascii");
  EXPECT_EQ(utf8::Lossy("\xE4\xB8\xAD"), "\xE4\xB8\xAD");
  EXPECT_EQ(utf8::Lossy("\xF0\x9F\x98"
                        "a"),
            kR + "a");                                            // truncated 4-byte
  EXPECT_EQ(utf8::Lossy("\xED\xA0\x80"), kR + kR + kR);           // surrogate: 3 parts
  EXPECT_EQ(utf8::Lossy("\xC0\xAF"), kR + kR);                    // overlong
  EXPECT_EQ(utf8::Lossy("\xF4\x90\x80\x80"), kR + kR + kR + kR);  // > U+10FFFF
  EXPECT_EQ(utf8::Lossy("a\xFF"
                        "b\x80"),
            "a" + kR + "b" + kR);
  EXPECT_EQ(utf8::Lossy("\xE4\xB8"), kR);  // cut at the end
  EXPECT_TRUE(utf8::IsValid("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8::IsValid("\xF0\x9F\x98"));
  EXPECT_EQ(utf8::ScanUnit("\xF0\x9F", 0).kind, utf8::Unit::Kind::kIncomplete);
}

TEST(Utf8Test, CodePointRoundTrip) {
  for (const uint32_t cp : {0x24u, 0xE9u, 0x4E2Du, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    utf8::AppendCodePoint(cp, &s);
    const utf8::Unit u = utf8::ScanUnit(s, 0);
    ASSERT_EQ(u.kind, utf8::Unit::Kind::kValid);
    ASSERT_EQ(u.length, s.size());
    EXPECT_EQ(utf8::DecodeAt(s, 0, u.length), cp);
  }
}

TEST(ByteLevelTest, TableIsTheGpt2Bijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_level::ByteToCodePoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(byte_level::CodePointToByte(cp), b);
  }
  EXPECT_EQ(byte_level::ByteToUtf8()[' '], "Ġ");
  EXPECT_EQ(byte_level::ByteToUtf8()['\n'], "Ċ");
  EXPECT_EQ(byte_level::ByteToUtf8()['a'], "a");
  EXPECT_EQ(byte_level::ByteToCodePoint(0xAD), 0x143u);  // soft hyphen is moved
  std::string bytes;
  ASSERT_TRUE(byte_level::Decode(byte_level::Encode("x \xE4\xB8\xAD\n"), &bytes));
  EXPECT_EQ(bytes, "x \xE4\xB8\xAD\n");
  EXPECT_FALSE(byte_level::Decode("中", &bytes));  // not a byte-level character
}

}  // namespace
}  // namespace vismoe
