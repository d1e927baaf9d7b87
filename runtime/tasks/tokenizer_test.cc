#include "runtime/tasks/tokenizer.h"

#include <gtest/gtest.h>

namespace kp::runtime {
namespace {

TEST(ByteTokenizerTest, IdsAreTheDocumentedOnesAndFitTheDebugVocabulary) {
  EXPECT_EQ(ByteTokenizer::kPad, 256);
  EXPECT_EQ(ByteTokenizer::kBos, 257);
  EXPECT_EQ(ByteTokenizer::kEos, 258);
  EXPECT_EQ(ByteTokenizer::kSep, 259);
  EXPECT_EQ(ByteTokenizer::kVocabSize, 260);
  EXPECT_LT(ByteTokenizer::kVocabSize, 2048);  // kimi-k3-debug's vocabulary
}

TEST(ByteTokenizerTest, EncodesOneIdPerByteHighBytesIncluded) {
  ByteTokenizer t;
  EXPECT_EQ(t.Encode("A1+"), (std::vector<std::int64_t>{65, 49, 43}));
  EXPECT_EQ(t.Encode("\xff\x80"), (std::vector<std::int64_t>{255, 128}));
  EXPECT_TRUE(t.Encode("").empty());
}

TEST(ByteTokenizerTest, RoundTripsEveryByte) {
  ByteTokenizer t;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  for (const std::string& s : {std::string(), std::string("123+456="), std::string("Grüße\n"), all}) {
    Result<std::string> back = t.Decode(t.Encode(s));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, s);
  }
}

TEST(ByteTokenizerTest, PromptIsBosTextSep) {
  ByteTokenizer t;
  EXPECT_EQ(t.EncodePrompt("1+2="), (std::vector<std::int64_t>{257, '1', '+', '2', '=', 259}));
}

TEST(ByteTokenizerTest, DecodeNamesSpecialsAndRejectsForeignIds) {
  ByteTokenizer t;
  std::vector<std::int64_t> ids = {257, 'x', 259, 256, 258};
  EXPECT_EQ(*t.Decode(ids), "<bos>x<sep><pad><eos>");
  std::vector<std::int64_t> bad = {'a', 260};
  Result<std::string> r = t.Decode(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token 260 at position 1"), std::string::npos) << r.status().message();
  std::vector<std::int64_t> negative = {-1};
  EXPECT_FALSE(t.Decode(negative).ok());
}

TEST(ByteTokenizerTest, ResponseStopsAtEosDropsSpecialsAndMarksForeignIds) {
  ByteTokenizer t;
  std::vector<std::int64_t> ids = {'5', 256, '7', 257, 259, '9', 258, '0', '0'};
  EXPECT_EQ(t.DecodeResponse(ids), "579");
  std::vector<std::int64_t> foreign = {'1', 1000, '2'};
  EXPECT_EQ(t.DecodeResponse(foreign), "1\xEF\xBF\xBD" "2");
  std::vector<std::int64_t> only_eos = {258, '1'};
  EXPECT_EQ(t.DecodeResponse(only_eos), "");
}

}  // namespace
}  // namespace kp::runtime
