// WriteFileAtomically: the new contents in place, no temporary file left,
// the old file untouched by a failed write, the hooks called in order.
#include "common/durable_file.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }
  std::string dir_;
};

TEST_F(DurableFileTest, ReplacesTheFileAndLeavesNothingElse) {
  const std::string path = dir_ + "/metrics.json";
  ASSERT_THAT(WriteFileAtomically(path, "first\n"), IsOk());
  EXPECT_EQ(Read(path), "first\n");
  ASSERT_THAT(WriteFileAtomically(path, std::string("second\0with a NUL", 17)), IsOk());
  EXPECT_EQ(Read(path), std::string("second\0with a NUL", 17));
  EXPECT_EQ(Entries(), std::vector<std::string>{"metrics.json"});
}

TEST_F(DurableFileTest, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const std::string path = dir_ + "/a.txt";
  ASSERT_THAT(WriteFileAtomically(path, "old"), IsOk());
  absl::Status failed = WriteFileAtomically(path, [](int) {
    errno = ENOSPC;
    return false;
  });
  // A full disk can clear: kUnavailable, which a job may retry.
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("No space left on device")));
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kUnavailable, HasSubstr(path + ".tmp-")));
  EXPECT_EQ(Read(path), "old");
  EXPECT_EQ(Entries(), std::vector<std::string>{"a.txt"});
  // Any other failure is the job's own: kInternal.
  failed = WriteFileAtomically(path, [](int) {
    errno = EIO;
    return false;
  });
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kInternal, HasSubstr("Input/output error")));
  EXPECT_EQ(FileError("cannot write", "x", EDQUOT).code(), absl::StatusCode::kUnavailable);
}

TEST_F(DurableFileTest, HooksSeeEachPointInOrderAndTheFileAtEach) {
  const std::string path = dir_ + "/b.txt";
  ASSERT_THAT(WriteFileAtomically(path, "old"), IsOk());
  std::vector<std::string> seen;
  ASSERT_THAT(WriteFileAtomically(
                  path, [](int fd) { return WriteFully(fd, "new", 3); },
                  [&](DurableWritePoint p) {
                    // Until the rename, readers see the old file.
                    seen.push_back(std::to_string(static_cast<int>(p)) + ":" + Read(path));
                  }),
              IsOk());
  EXPECT_EQ(seen, (std::vector<std::string>{"0:old", "1:old", "2:new"}));
}

TEST_F(DurableFileTest, ANonexistentDirectoryIsNamed) {
  EXPECT_THAT(WriteFileAtomically(dir_ + "/missing/c.txt", "x"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cannot create " + dir_ + "/missing/c.txt.tmp-")));
  EXPECT_EQ(ParentDirectory("/a/b/c"), "/a/b");
  EXPECT_EQ(ParentDirectory("/c"), "/");
  EXPECT_EQ(ParentDirectory("c"), ".");
}

}  // namespace
}  // namespace trainyard
