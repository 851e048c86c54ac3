// A test binary whose cases all pass, then exits 66 after gtest has written
// its XML, the way ThreadSanitizer or LeakSanitizer end a process whose
// cases passed. scripts/test.sh must count it as failed.
#include <cstdlib>

#include "gtest/gtest.h"

namespace {

struct ExitsBadly {
  ~ExitsBadly() { std::_Exit(66); }
} exits_badly;

TEST(FailsAfterPassingXml, Passes) { EXPECT_EQ(1 + 1, 2); }

}  // namespace
