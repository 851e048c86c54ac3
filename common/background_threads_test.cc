#include "common/background_threads.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace trainyard {
namespace {

// Waits (bounded) until `threads` has no task running.
bool WaitUntilIdle(const BackgroundThreads& threads) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (threads.running() > 0) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(BackgroundThreadsTest, EndedThreadsAreJoinedByTheNextStart) {
  BackgroundThreads threads;
  std::atomic<int> done{0};
  for (int i = 0; i < 100; ++i) {
    threads.Start([&] { done++; });
    ASSERT_TRUE(WaitUntilIdle(threads));
    // The one that just ended is held until the next call; none before it.
    EXPECT_EQ(threads.held(), 1u) << "after task " << i;
  }
  EXPECT_EQ(threads.Reap(), 1u);
  EXPECT_EQ(threads.held(), 0u);
  EXPECT_EQ(done.load(), 100);
}

TEST(BackgroundThreadsTest, RunningThreadsAreKeptAndJoinAllWaits) {
  BackgroundThreads threads;
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    threads.Start([&] {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      done++;
    });
  }
  EXPECT_EQ(threads.Reap(), 0u);
  EXPECT_EQ(threads.held(), 3u);
  EXPECT_EQ(threads.running(), 3u);
  release = true;
  threads.JoinAll();
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(threads.held(), 0u);
  EXPECT_EQ(threads.running(), 0u);
}

TEST(BackgroundThreadsTest, WhatATaskHoldsIsReleasedBeforeItCountsAsEnded) {
  BackgroundThreads threads;
  auto resource = std::make_shared<int>(7);
  std::weak_ptr<int> watch = resource;
  threads.Start([held = std::move(resource)] { EXPECT_EQ(*held, 7); });
  ASSERT_TRUE(WaitUntilIdle(threads));
  EXPECT_TRUE(watch.expired());
}

TEST(BackgroundThreadsTest, ATaskMayStartAnotherAndJoinAllWaitsForBoth) {
  std::atomic<int> done{0};
  {
    BackgroundThreads threads;
    threads.Start([&] {
      threads.Start([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        done++;
      });
      done++;
    });
  }  // the destructor joins both
  EXPECT_EQ(done.load(), 2);
}

}  // namespace
}  // namespace trainyard
