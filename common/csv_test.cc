#include "common/csv.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(CsvTest, QuotesOnlyWhatMustBeQuoted) {
  EXPECT_EQ(CsvField("kimi-k3-debug"), "kimi-k3-debug");
  EXPECT_EQ(CsvField("run 3 (hand)"), "run 3 (hand)");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("cr\r"), "\"cr\r\"");
  EXPECT_EQ(CsvField(""), "");
}

TEST(CsvTest, DoublesQuotesInsideAQuotedField) {
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("plain", /*always_quote=*/true), "\"plain\"");
  EXPECT_EQ(CsvField("6\" pipe", /*always_quote=*/true), "\"6\"\" pipe\"");
}

TEST(CsvTest, RowJoinsFieldsAndEndsTheLine) {
  EXPECT_EQ(CsvRow({"1", "m,odel", "", "x\"y"}), "1,\"m,odel\",,\"x\"\"y\"\n");
  EXPECT_EQ(CsvRow({}), "\n");
}

}  // namespace
}  // namespace kp
