// Two threads write one int without a lock: ThreadSanitizer must fail this
// test (run only under --config=tsan, by scripts/test.sh's counting check).
#include <thread>

#include "gtest/gtest.h"

namespace {

int counter = 0;

TEST(DataRace, TwoWritersWithoutALock) {
  std::thread a([] {
    for (int i = 0; i < 1000; ++i) counter = counter + 1;
  });
  std::thread b([] {
    for (int i = 0; i < 1000; ++i) counter = counter + 1;
  });
  a.join();
  b.join();
  EXPECT_GT(counter, 0);
}

}  // namespace
