#include "cli/options.h"

#include <sstream>

#include <gtest/gtest.h>

namespace kp {
namespace {

po::options_description Flags() {
  po::options_description desc;
  desc.add_options()("nodes", IntFlag(1, 8), "nodes")("name", po::value<std::string>(), "a name")(
      "seed", SeedFlag()->default_value(0), "seed")("search", "search")("top", IntFlag(1, 10), "top");
  return desc;
}

Status Parse(const std::vector<std::string>& args, po::variables_map* vm) {
  std::ostringstream out;
  return ParseCommand(args, Flags(), vm, out).status();
}

// A word that is no flag's value (`--nodes 4 8`) is an error naming it, not
// dropped (issue 28).
TEST(ParseCommandTest, AStrayWordIsRefusedNamingIt) {
  po::variables_map vm;
  EXPECT_EQ(Parse({"--nodes", "4", "8"}, &vm).message(),
            "unexpected argument \"8\": every value follows its --flag (see --help)");
  po::variables_map ok;
  EXPECT_TRUE(Parse({"--nodes", "4"}, &ok).ok());
  EXPECT_EQ(ok["nodes"].as<int>(), 4);
}

TEST(ParseCommandTest, APositionalBeyondItsCountIsNamed) {
  po::options_description desc = Flags();
  desc.add_options()("run", po::value<std::string>(), "the run");
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  std::ostringstream out;
  EXPECT_TRUE(ParseCommand({"7"}, desc, &vm, out, &positional).ok());
  EXPECT_EQ(vm["run"].as<std::string>(), "7");
  po::variables_map two;
  EXPECT_EQ(ParseCommand({"7", "9"}, desc, &two, out, &positional).status().message(),
            "unexpected argument \"9\": every value follows its --flag (see --help)");
}

TEST(ParseCommandTest, ValuesAreNeverEmptyNorHoldControlBytes) {
  po::variables_map vm;
  EXPECT_EQ(Parse({"--name", ""}, &vm).message(), "--name: the value is empty");
  po::variables_map nl;
  EXPECT_EQ(Parse({"--name", "a\ntouch x"}, &nl).message(),
            "--name: must not contain control characters, got \"a\\ntouch x\"");
  po::variables_map esc;
  EXPECT_EQ(Parse({"--name", "a\x1b[2J"}, &esc).message(), "--name: must not contain control characters, got \"a\\e[2J\"");
}

TEST(ParseCommandTest, ASeedIsNeverWrapped) {
  po::variables_map vm;
  EXPECT_EQ(Parse({"--seed", "-1"}, &vm).message(), "--seed: must be >= 0, got -1 (at most 9223372036854775807)");
  po::variables_map big;
  EXPECT_EQ(Parse({"--seed", "9223372036854775807"}, &big).message(), "");
  EXPECT_EQ(big["seed"].as<std::uint64_t>(), 9223372036854775807ULL);
}

TEST(ParseCommandTest, AFlagThatWouldDoNothingIsRefused) {
  po::variables_map vm;
  ASSERT_TRUE(Parse({"--top", "3"}, &vm).ok());
  EXPECT_EQ(FlagNeeds(vm, "top", vm.count("search") > 0, "--search").message(),
            "--top: needs --search; without it the flag does nothing");
  EXPECT_TRUE(FlagNeeds(vm, "seed", false, "x").ok());  // defaulted, not given
  EXPECT_EQ(FirstGivenFlag(vm, Flags()), "--top");
  EXPECT_EQ(FirstGivenFlag(vm, Flags(), {"top"}), "");
}

}  // namespace
}  // namespace kp
