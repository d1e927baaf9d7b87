#include "common/table.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(TableTest, PadsColumnsAndRightAlignsNumbers) {
  Table t({"role", "total", "layers"});
  t.AddRow({"actor", "502.7 GB", "2-4"});
  t.AddRow({"reference", "1.6 GB", "7, head"});
  EXPECT_EQ(t.Render(),
            "role       total     layers\n"
            "----------------------------\n"
            "actor      502.7 GB  2-4\n"
            "reference    1.6 GB  7, head\n");
}

TEST(TableTest, Formats) {
  EXPECT_EQ(FormatFixed(3.14159, 2), "3.14");
  EXPECT_EQ(FormatGB(141e9), "141.0 GB");
  EXPECT_EQ(FormatCount(1.026e12), "1.026T");
  EXPECT_EQ(FormatCount(32.86e9), "32.86B");
  EXPECT_EQ(FormatCount(25.8e6), "25.80M");
}

}  // namespace
}  // namespace kp
