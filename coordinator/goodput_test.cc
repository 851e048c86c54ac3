#include "coordinator/goodput.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(GoodputTest, ChunksPastTheFurthestStepAreProductiveTheOthersRecomputed) {
  Goodput g;
  // Steps 0..10: 10 s, of which 1 s data wait and 2 s checkpoint.
  AccountChunk(0, 10, 10.0, 1.0, 2.0, &g);
  EXPECT_DOUBLE_EQ(g.productive_seconds(), 7.0);
  EXPECT_DOUBLE_EQ(g.recomputed_seconds(), 0.0);
  EXPECT_DOUBLE_EQ(g.data_wait_seconds(), 1.0);
  EXPECT_DOUBLE_EQ(g.checkpoint_seconds(), 2.0);
  EXPECT_EQ(g.trained_to_step(), 10);
  EXPECT_EQ(g.recomputed_steps(), 0);
  // A restart resumed from step 6: steps 6..10 again, then 10..12 new.
  AccountChunk(6, 6, 6.0, 0.0, 0.0, &g);
  EXPECT_DOUBLE_EQ(g.productive_seconds(), 7.0 + 2.0);
  EXPECT_DOUBLE_EQ(g.recomputed_seconds(), 4.0);
  EXPECT_EQ(g.recomputed_steps(), 4);
  EXPECT_EQ(g.trained_to_step(), 12);
  // Waits larger than the chunk are capped by it.
  AccountChunk(12, 2, 1.0, 5.0, 5.0, &g);
  EXPECT_DOUBLE_EQ(g.data_wait_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(g.checkpoint_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(g.productive_seconds(), 9.0);
}

TEST(GoodputTest, WallTimeTheRestAndTheRatio) {
  Goodput g;
  g.set_productive_seconds(80);
  g.set_recovery_seconds(5);
  g.set_queued_seconds(10);
  FinishGoodput(1000, 0, 101000, &g);  // running: to now
  EXPECT_DOUBLE_EQ(g.wall_seconds(), 100);
  EXPECT_DOUBLE_EQ(g.other_seconds(), 5);
  EXPECT_DOUBLE_EQ(g.ratio(), 0.8);
  FinishGoodput(1000, 51000, 101000, &g);  // ended: to its end; never below 0
  EXPECT_DOUBLE_EQ(g.wall_seconds(), 50);
  EXPECT_DOUBLE_EQ(g.other_seconds(), 0);
  EXPECT_DOUBLE_EQ(g.ratio(), 1.0);
}

}  // namespace
}  // namespace trainyard
