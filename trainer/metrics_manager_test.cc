#include "trainer/metrics_manager.h"

#include <dirent.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/event_writer.h"

namespace trainyard {
namespace {

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  return names;
}

TEST(Crc32cTest, KnownVectorsAndMask) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(Crc32c(""), 0u);
  const uint32_t crc = Crc32c("123456789");
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(MetricsManagerTest, TimingMetricsFromTheInjectedClock) {
  SimulatedClock clock(absl::FromUnixSeconds(1000));
  const std::string dir = ::testing::TempDir() + "/mm_timing";
  MetricsManager manager("train", dir, /*rank=*/0, /*num_workers=*/2, &clock);
  manager.StartDurationTimer();
  clock.AdvanceTime(absl::Seconds(4));
  auto summary =
      manager.WriteMetricsSummary({{"loss", 2.5}, {"timing/seqs", 64}, {"timing/target_tokens", 1000}}, /*step=*/20,
                                  /*num_steps=*/10);
  ASSERT_TRUE(summary.has_value());
  EXPECT_DOUBLE_EQ(summary->at("loss"), 2.5);
  EXPECT_DOUBLE_EQ(summary->at("timing/seconds"), 4.0);
  EXPECT_DOUBLE_EQ(summary->at("timing/steps_per_second"), 2.5);
  EXPECT_DOUBLE_EQ(summary->at("timing/seqs_per_second"), 16.0);
  EXPECT_DOUBLE_EQ(summary->at("timing/seqs_per_second_per_core"), 8.0);
  EXPECT_DOUBLE_EQ(summary->at("timing/target_tokens_per_second"), 250.0);
  EXPECT_DOUBLE_EQ(summary->at("timing/uptime"), 4.0);
  EXPECT_TRUE(manager.Close().ok());
  std::vector<std::string> files = List(dir + "/train");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0], ::testing::StartsWith("events.out.tfevents."));
}

TEST(MetricsManagerTest, OnlyRankZeroWrites) {
  const std::string dir = ::testing::TempDir() + "/mm_rank1";
  MetricsManager manager("train", dir, /*rank=*/1);
  EXPECT_FALSE(manager.WriteMetricsSummary({{"loss", 1.0}}, 1, 1).has_value());
  manager.WriteScalar("x", 1.0, 1);
  EXPECT_TRUE(manager.Close().ok());
  EXPECT_TRUE(List(dir).empty());
  EXPECT_TRUE(manager.log_dir().empty());
}

TEST(MetricsManagerTest, UnwritableDirectoryIsReportedAtClose) {
  MetricsManager manager("train", "/proc/nope", /*rank=*/0);
  manager.WriteScalar("x", 1.0, 1);
  absl::Status status = manager.Close();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("/proc/nope"));
}

}  // namespace
}  // namespace trainyard
