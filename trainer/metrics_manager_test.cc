#include "trainer/metrics_manager.h"

#include <dirent.h>
#include <sys/resource.h>

#include <csignal>
#include <fstream>
#include <sstream>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tensorboard.pb.h"
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
  EXPECT_DOUBLE_EQ(summary->at("timing/mfu"), 0.25);             // 1e12 per core of 4e12
  EXPECT_EQ(summary->count("timing/mfu_vs_measured_peak"), 0u);  // no probe
  manager.set_measured_peak_flops_per_core(2e12);
  clock.AdvanceTime(absl::Seconds(4));
  summary = manager.WriteMetricsSummary({{"timing/model_flops", 8e12}}, 30, 10);
  ASSERT_TRUE(summary.has_value());
  EXPECT_DOUBLE_EQ(summary->at("timing/mfu"), 0.25);
  EXPECT_DOUBLE_EQ(summary->at("timing/mfu_vs_measured_peak"), 0.5);  // 1e12 of the probe's 2e12
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

// The records of an event file, checked whole (lengths and both CRCs): the
// steps of its scalar events; fails the test on a torn or corrupt record.
std::vector<int64_t> ReadSteps(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  std::vector<int64_t> steps;
  size_t pos = 0;
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
    return v;
  };
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 12) {
      ADD_FAILURE() << path << ": a torn header at byte " << pos;
      break;
    }
    const std::string length = bytes.substr(pos, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(length[i]);
    EXPECT_EQ(u32(pos + 8), MaskedCrc32c(length)) << "at byte " << pos;
    if (bytes.size() - pos - 12 < n + 4) {
      ADD_FAILURE() << path << ": a torn record at byte " << pos;
      break;
    }
    const std::string data = bytes.substr(pos + 12, n);
    EXPECT_EQ(u32(pos + 12 + n), MaskedCrc32c(data)) << "at byte " << pos;
    tensorboard::Event event;
    EXPECT_TRUE(event.ParseFromString(data));
    if (event.has_summary()) steps.push_back(event.step());
    pos += 12 + n + 4;
  }
  return steps;
}

TEST(EventFileWriterTest, AFailedFlushDropsTheSummaryWholeAndTheFileStaysReadable) {
  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/events-full";
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteScalar("loss", 1.0f, 1, 1.0).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  // A full disk, as a file size limit: the next summary (50 scalars) gets
  // some of its bytes onto the disk before the flush fails.
  struct rlimit before;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  std::ifstream sized((*writer)->path(), std::ios::binary | std::ios::ate);
  struct rlimit limit = before;
  limit.rlim_cur = static_cast<rlim_t>(sized.tellg()) + 100;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  absl::Status failed;
  for (int i = 0; i < 50 && failed.ok(); ++i) failed = (*writer)->WriteScalar("x", 2.0f, 2, 2.0);
  if (failed.ok()) failed = (*writer)->Flush();
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &before), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.message()), ::testing::HasSubstr("File too large"));
  EXPECT_THAT(std::string(failed.message()), ::testing::HasSubstr("the records since its last flush were dropped"));
  EXPECT_EQ(ReadSteps((*writer)->path()), (std::vector<int64_t>{1}));
  // The disk has room again: later summaries append after the last whole one.
  ASSERT_TRUE((*writer)->WriteScalar("loss", 3.0f, 3, 3.0).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  EXPECT_EQ(ReadSteps((*writer)->path()), (std::vector<int64_t>{1, 3}));
}

}  // namespace
}  // namespace trainyard
