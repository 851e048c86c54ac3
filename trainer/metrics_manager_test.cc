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

TEST(MetricsManagerTest, ModelFlopsUtilisationAgainstThePeakPerCore) {
  SimulatedClock clock(absl::FromUnixSeconds(1000));
  MetricsManager manager("train", ::testing::TempDir() + "/mm_mfu", /*rank=*/0, /*num_workers=*/2, &clock);
  manager.StartDurationTimer();
  clock.AdvanceTime(absl::Seconds(4));
  auto plain = manager.WriteMetricsSummary({{"timing/model_flops", 8e12}}, 10, 10);
  ASSERT_TRUE(plain.has_value());
  EXPECT_DOUBLE_EQ(plain->at("timing/model_flops_per_second"), 2e12);
  EXPECT_DOUBLE_EQ(plain->at("timing/model_flops_per_second_per_core"), 1e12);
  EXPECT_EQ(plain->count("timing/mfu"), 0u);  // no peak given
  manager.set_peak_flops_per_core(4e12);
  clock.AdvanceTime(absl::Seconds(4));
  auto summary = manager.WriteMetricsSummary({{"timing/model_flops", 8e12}}, 20, 10);
  ASSERT_TRUE(summary.has_value());
  EXPECT_DOUBLE_EQ(summary->at("timing/mfu"), 0.25);  // 1e12 per core of 4e12
  EXPECT_TRUE(manager.Close().ok());
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
