// Loses the only pointer to a heap block: LeakSanitizer reports it when the
// process exits, after gtest wrote an all-pass XML (run only under
// --config=asan, by scripts/test.sh's counting check).
#include "gtest/gtest.h"

namespace {

char* volatile sink = nullptr;

TEST(Leak, LosesABlock) {
  sink = new char[4096];
  sink[0] = 1;
  EXPECT_EQ(sink[0], 1);
  sink = nullptr;
}

}  // namespace
