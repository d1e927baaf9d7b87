#include "common/text.h"

#include <string>

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(TextTest, ControlBytesAreShownEscapedAndNothingElseChanges) {
  EXPECT_EQ(EscapeControl("kimi-k2.6"), "kimi-k2.6");
  EXPECT_EQ(EscapeControl("x\ntouch /tmp/pwned\n#"), "x\\ntouch /tmp/pwned\\n#");
  EXPECT_EQ(EscapeControl("\x1b[31mred"), "\\e[31mred");
  EXPECT_EQ(EscapeControl(std::string("a\0b", 3)), "a\\0b");
  EXPECT_EQ(EscapeControl("\t\r\x7f\x01"), "\\t\\r\\x7f\\x01");
  EXPECT_EQ(EscapeControl("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 is printable
}

TEST(TextTest, AQuoteIsCutAndSaysHowMuchWasLeftOut) {
  EXPECT_EQ(QuoteBounded("short", 80), "short");
  const std::string big(10'000'000, 'x');
  const std::string quoted = QuoteBounded(big, 80);
  EXPECT_EQ(quoted, std::string(80, 'x') + " ... (9999920 more bytes)");
  // Never in the middle of a UTF-8 sequence: "é" is two bytes.
  EXPECT_EQ(QuoteBounded("ab\xc3\xa9", 3), "ab ... (2 more bytes)");
}

TEST(TextTest, OneLineIsBoundedAndHasNoLineBreak) {
  const std::string line = OneLine("--x: " + std::string(5000, 'y') + "\nsecond");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_LE(line.size(), kMaxErrorLineBytes + 40);
  EXPECT_EQ(line.rfind("--x: yyy", 0), 0u);
}

TEST(TextTest, NamesArePrintableAsciiAndBounded) {
  EXPECT_TRUE(CheckName("name", "Kimi K2.6 (1T, INT4 experts)").ok());
  EXPECT_TRUE(CheckName("name", std::string(kMaxNameBytes, 'a')).ok());
  for (const std::string& bad : {std::string(""), std::string(kMaxNameBytes + 1, 'a'), std::string("x\ntouch /tmp/p"),
                                std::string("a\x1b[2Jb"), std::string("a\0b", 3), std::string(" lead"),
                                std::string("trail "), std::string("caf\xc3\xa9")}) {
    const Status s = CheckName("model.name", bad);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind("model.name: must be 1 to 128 printable ASCII", 0), 0u) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
    EXPECT_EQ(s.message().find('\x1b'), std::string::npos);
  }
}

TEST(TextTest, TextFieldsAllowTabsButNoOtherControlBytes) {
  EXPECT_TRUE(CheckText("source", "Table 3,\tp. 12").ok());
  EXPECT_FALSE(CheckText("source", "a\nb").ok());
  EXPECT_FALSE(CheckText("source", std::string(kMaxTextFieldBytes + 1, 'a')).ok());
}

}  // namespace
}  // namespace kp
