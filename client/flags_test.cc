#include "client/flags.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Parsed {
  std::string name;
  std::vector<std::string> sets;
  int count = 0;
  bool json = false;
  std::vector<std::string> positional;
};

absl::Status ParseInto(const std::vector<std::string>& args, Parsed* p, bool* help = nullptr) {
  FlagSet flags("cmd ARG...", "A command.");
  flags.AddString("name", &p->name, "NAME", "a name");
  flags.AddRepeated("set", &p->sets, "K=V", "an override");
  flags.AddInt("count", &p->count, "N", "a count");
  flags.AddBool("json", &p->json, "JSON output");
  absl::Status status = flags.Parse(args, &p->positional);
  if (help) *help = flags.help();
  return status;
}

TEST(FlagSetTest, BothSpellingsRepeatedAndPositional) {
  Parsed p;
  ASSERT_THAT(
      ParseInto({"a.textproto", "--name", "x", "--set=k=v", "--set", "a=b", "--count=3", "--json", "b.textproto"}, &p),
      IsOk());
  EXPECT_EQ(p.name, "x");
  EXPECT_THAT(p.sets, ElementsAre("k=v", "a=b"));
  EXPECT_EQ(p.count, 3);
  EXPECT_TRUE(p.json);
  EXPECT_THAT(p.positional, ElementsAre("a.textproto", "b.textproto"));
}

TEST(FlagSetTest, DoubleDashEndsFlags) {
  Parsed p;
  ASSERT_THAT(ParseInto({"--json", "--", "--name"}, &p), IsOk());
  EXPECT_THAT(p.positional, ElementsAre("--name"));
  EXPECT_EQ(p.name, "");
}

TEST(FlagSetTest, Errors) {
  Parsed p;
  EXPECT_THAT(ParseInto({"--nme", "x"}, &p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown flag --nme; see trainyard cmd --help")));
  EXPECT_THAT(ParseInto({"--name"}, &p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--name needs a value (NAME)")));
  EXPECT_THAT(ParseInto({"--count=many"}, &p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--count takes an integer, got \"many\"")));
  EXPECT_THAT(ParseInto({"--json=perhaps"}, &p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("true or false")));
}

TEST(FlagSetTest, HelpListsEveryFlag) {
  Parsed p;
  bool help = false;
  ASSERT_THAT(ParseInto({"--help"}, &p, &help), IsOk());
  EXPECT_TRUE(help);
  FlagSet flags("cmd ARG...", "A command.");
  flags.AddRepeated("set", &p.sets, "K=V", "an override");
  EXPECT_THAT(flags.Help(), HasSubstr("usage: trainyard cmd ARG..."));
  EXPECT_THAT(flags.Help(), HasSubstr("--set K=V (repeatable)"));
}

}  // namespace
}  // namespace trainyard
