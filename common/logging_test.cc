#include "common/logging.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(LoggingTest, EveryLineCarriesJobRankAndHost) {
  std::ostringstream out;
  auto logger = MakeLogger("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  SetLogContext({"j-42", 3, "node7"});
  logger->info("step {} done", 17);
  EXPECT_THAT(out.str(),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+ I \\[job=j-42 rank=3 host=node7\\] step 17 done\n"));
}

TEST(LoggingTest, UnsetFieldsPrintDashAndHostDefaultsToHostname) {
  SetLogContext({});
  const std::string context = FormatLogContext();
  EXPECT_THAT(context, MatchesRegex("job=- rank=- host=.+"));
  EXPECT_THAT(context, ::testing::Not(HasSubstr("host= ")));
}

TEST(LoggingTest, SetLogJobKeepsHost) {
  SetLogContext({"", -1, "h1"});
  SetLogJob("j-7", 0);
  EXPECT_EQ(FormatLogContext(), "job=j-7 rank=0 host=h1");
}

TEST(LoggingTest, UnknownLevelIsRejectedWithAllowedNames) {
  std::string error;
  LoggingOptions options;
  options.level = "verbose";
  EXPECT_FALSE(InitLogging(options, &error));
  EXPECT_THAT(error, HasSubstr("\"verbose\""));
  EXPECT_THAT(error, HasSubstr("trace, debug, info"));
}

TEST(LoggingTest, UnwritableFileIsRejected) {
  std::string error;
  LoggingOptions options;
  options.file = "/proc/no/such/dir/log.txt";
  EXPECT_FALSE(InitLogging(options, &error));
  EXPECT_THAT(error, HasSubstr("/proc/no/such/dir/log.txt"));
}

}  // namespace
}  // namespace trainyard
