#include "gtest/gtest.h"

namespace {

TEST(PassesAndSkips, Passes) { EXPECT_EQ(2 * 3, 6); }

TEST(PassesAndSkips, Skips) { GTEST_SKIP() << "skipped on purpose: the counting fixture's skip"; }

}  // namespace
