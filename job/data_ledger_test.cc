#include "job/data_ledger.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "collective/fake_collective.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Path(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::filesystem::remove(path);
  return path;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// body(rank, collective) on `world` threads of one FakeGroup.
void OnRanks(int world, const std::function<void(int, Collective*)>& body) {
  auto group = std::make_shared<FakeGroup>(world, absl::Seconds(30));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      FakeCollective collective(group, r);
      body(r, &collective);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(DataLedgerTest, LinesAppendAndReadBackWithTheFullDigest) {
  const std::string path = Path("ledger.jsonl");
  EXPECT_THAT(ReadLedger(path).status(), StatusCodeIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(AppendLedger(path, {{1, 8, 0xfedcba9876543210ull}, {2, 7, 5}}), IsOk());
  ASSERT_THAT(AppendLedger(path, {{2, 7, 5}}), IsOk());
  EXPECT_EQ(Contents(path),
            "{\"step\":1,\"examples\":8,\"digest\":\"fedcba9876543210\"}\n"
            "{\"step\":2,\"examples\":7,\"digest\":\"0000000000000005\"}\n"
            "{\"step\":2,\"examples\":7,\"digest\":\"0000000000000005\"}\n");
  absl::StatusOr<std::vector<LedgerEntry>> read = ReadLedger(path);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_THAT(*read, ElementsAre(LedgerEntry{1, 8, 0xfedcba9876543210ull}, LedgerEntry{2, 7, 5}, LedgerEntry{2, 7, 5}));
}

TEST(DataLedgerTest, AHalfWrittenLastLineIsCutBeforeTheNextAppend) {
  const std::string path = Path("torn.jsonl");
  ASSERT_THAT(AppendLedger(path, {{1, 8, 1}}), IsOk());
  std::ofstream(path, std::ios::app) << "{\"step\":2,\"exam";  // a crash mid-write
  EXPECT_THAT(ReadLedger(path).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("torn.jsonl:2: want {\"step\":INT")));
  ASSERT_THAT(AppendLedger(path, {{2, 8, 2}}), IsOk());
  absl::StatusOr<std::vector<LedgerEntry>> read = ReadLedger(path);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_THAT(*read, ElementsAre(LedgerEntry{1, 8, 1}, LedgerEntry{2, 8, 2}));
  std::ofstream(path, std::ios::app) << "{\"step\":3,\"examples\":1,\"digest\":\"xyz\"}\n";
  EXPECT_THAT(ReadLedger(path).status(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("torn.jsonl:3:")));
  // A directory that cannot be made (a file is in its place).
  EXPECT_THAT(AppendLedger(path + "/ledger.jsonl", {{1, 1, 1}}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("torn.jsonl/ledger.jsonl: open: Not a directory")));
}

// A write that fails keeps its lines for the next one.
TEST(DataLedgerTest, LinesAFailedWriteLeftAreWrittenByTheNext) {
  const std::string dir = ::testing::TempDir() + "/blocked";
  std::filesystem::remove_all(dir);
  std::ofstream(dir) << "a file where the directory should be";
  DataLedger ledger;
  EXPECT_THAT(ledger.Write(dir + "/ledger.jsonl", {{1, 4, 1}}), StatusCodeIs(absl::StatusCode::kInternal));
  EXPECT_EQ(ledger.unwritten(), 1);
  std::filesystem::remove(dir);
  ASSERT_THAT(ledger.Write(dir + "/ledger.jsonl", {{2, 4, 2}}), IsOk());
  EXPECT_EQ(ledger.unwritten(), 0);
  absl::StatusOr<std::vector<LedgerEntry>> read = ReadLedger(dir + "/ledger.jsonl");
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_THAT(*read, ElementsAre(LedgerEntry{1, 4, 1}, LedgerEntry{2, 4, 2}));
}

// Rank-strided shares sum (mod 2^64) into the global batch's entry; whole
// batches (ELASTIC) are taken as they are; a put-back batch is forgotten.
TEST(DataLedgerTest, SharesSumOverTheRanksAndWholeBatchesDoNot) {
  std::vector<std::vector<LedgerEntry>> summed(2), whole(2);
  OnRanks(2, [&](int r, Collective* collective) {
    DataLedger ledger;
    ledger.Add(1, {3, r == 0 ? ~uint64_t{0} : 2});  // wraps: 2^64 - 1 + 2 = 1
    ledger.Add(2, {4 + r, 10u * (r + 1)});
    ledger.Add(3, {1, 99});
    ledger.DropAfter(2);
    summed[r] = std::move(ledger.TakeGlobal(collective, /*whole_batches=*/false)).value();
    EXPECT_TRUE(ledger.pending().empty());
    ledger.Add(3, {6, 7});
    whole[r] = std::move(ledger.TakeGlobal(collective, /*whole_batches=*/true)).value();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(summed[r], ElementsAre(LedgerEntry{1, 6, 1}, LedgerEntry{2, 9, 30})) << r;
    EXPECT_THAT(whole[r], ElementsAre(LedgerEntry{3, 6, 7})) << r;
  }
}

TEST(DataLedgerTest, RanksOnDifferentStepsAreAnInternalError) {
  OnRanks(2, [&](int r, Collective* collective) {
    DataLedger ledger;
    ledger.Add(1, {1, 1});
    if (r == 1) ledger.Add(2, {1, 1});
    EXPECT_THAT(ledger.TakeGlobal(collective, false).status(),
                StatusIs(absl::StatusCode::kInternal,
                         HasSubstr("different steps (rank 0: 1 step(s) 1..1, rank 1: 2 step(s) 1..2)")));
  });
}

// After a regroup the furthest rank's entries replace the others' (a rank
// behind, a fresh one); an empty source empties them.
TEST(DataLedgerTest, TheSourcesEntriesReachEveryRankOfTheNewGroup) {
  std::vector<std::vector<LedgerEntry>> after(3);
  OnRanks(3, [&](int r, Collective* collective) {
    DataLedger ledger;
    if (r < 2) ledger.Add(5, {2, 50});
    if (r == 1) ledger.Add(6, {2, 60});  // the furthest
    ASSERT_THAT(ledger.ShareFrom(collective, 1), IsOk());
    after[r] = ledger.pending();
    ASSERT_THAT(ledger.ShareFrom(collective, 2), IsOk());  // rank 2 now holds them too: no change
    EXPECT_EQ(ledger.pending(), after[r]);
  });
  for (int r = 0; r < 3; ++r) EXPECT_THAT(after[r], ElementsAre(LedgerEntry{5, 2, 50}, LedgerEntry{6, 2, 60})) << r;
  OnRanks(2, [&](int r, Collective* collective) {
    DataLedger ledger;
    if (r == 1) ledger.Add(9, {1, 1});
    ASSERT_THAT(ledger.ShareFrom(collective, 0), IsOk());
    EXPECT_TRUE(ledger.pending().empty()) << r;
  });
}

}  // namespace
}  // namespace trainyard
