#include "checkpoint/checkpoint_dir.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Dir(const std::string& name) { return ::testing::TempDir() + "/" + name; }

void Write(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

std::string Commit(const std::string& name) {
  auto writer = CheckpointWriter::Begin(Dir(name));
  EXPECT_TRUE(writer.ok()) << writer.status();
  Write(writer->Path("params.safetensors"), "0123456789");
  EXPECT_THAT(writer->Commit(R"({"step": 7})"), IsOk());
  return Dir(name);
}

TEST(Sha256Test, KnownDigest) {
  Write(Dir("abc.txt"), "abc");
  EXPECT_EQ(*Sha256File(Dir("abc.txt")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CheckpointDirTest, CommitThenVerify) {
  const std::string dir = Commit("ckpt_ok");
  absl::StatusOr<CheckpointContents> contents = VerifyCheckpoint(dir);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_THAT(contents->files, ElementsAre("metadata.json", "params.safetensors"));
  EXPECT_EQ(contents->metadata_json, R"({"step": 7})");
  struct stat st;
  EXPECT_NE(stat((dir + ".tmp-" + std::to_string(getpid())).c_str(), &st), 0);  // renamed away
}

TEST(CheckpointDirTest, UncommittedDirectoryIsNotACheckpoint) {
  auto writer = CheckpointWriter::Begin(Dir("ckpt_crash"));
  ASSERT_TRUE(writer.ok());
  Write(writer->Path("params.safetensors"), "partial");
  // Crash before Commit: the final name does not exist, the temporary one
  // has no manifest.
  EXPECT_THAT(VerifyCheckpoint(Dir("ckpt_crash")).status(), StatusCodeIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(VerifyCheckpoint(Dir("ckpt_crash") + ".tmp-" + std::to_string(getpid())).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no MANIFEST.json")));
  writer->Abort();
}

TEST(CheckpointDirTest, FlippedByteAndTruncationAreDataLossNamingTheFile) {
  const std::string dir = Commit("ckpt_flip");
  Write(dir + "/params.safetensors", "0123456780");
  EXPECT_THAT(VerifyCheckpoint(dir).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("params.safetensors: SHA-256 mismatch")));
  Write(dir + "/params.safetensors", "01234");
  EXPECT_THAT(VerifyCheckpoint(dir).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("params.safetensors: 5 bytes, the manifest says 10")));
  unlink((dir + "/params.safetensors").c_str());
  EXPECT_THAT(VerifyCheckpoint(dir).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("listed in the manifest but missing")));
}

TEST(CheckpointDirTest, ExistingTargetIsRefused) {
  const std::string dir = Commit("ckpt_twice");
  EXPECT_THAT(CheckpointWriter::Begin(dir).status(), StatusCodeIs(absl::StatusCode::kAlreadyExists));
}

TEST(CheckpointDirTest, ReplaceSwapsTheNewCheckpointInAndRemovesTheOld) {
  const std::string dir = Commit("ckpt_replaced");
  auto writer = CheckpointWriter::Begin(dir, /*replace=*/true);
  ASSERT_THAT(writer.status(), IsOk());
  Write(writer->Path("params.safetensors"), "new contents");
  // Until the commit, readers see the old checkpoint.
  EXPECT_THAT(VerifyCheckpoint(dir).status(), IsOk());
  ASSERT_THAT(writer->Commit(R"({"step": 7})"), IsOk());
  auto contents = VerifyCheckpoint(dir);
  ASSERT_THAT(contents.status(), IsOk());
  std::ifstream in(dir + "/params.safetensors");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "new contents");
  // Nothing else is left beside it: the old one is gone, not renamed aside.
  std::vector<std::string> siblings;
  for (const auto& e : std::filesystem::directory_iterator(::testing::TempDir())) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt_replaced", 0) == 0) siblings.push_back(name);
  }
  EXPECT_EQ(siblings, std::vector<std::string>{"ckpt_replaced"});
}

TEST(CheckpointDirTest, ReplaceNeverTakesTheNameFromAFileOrAnotherDirectory) {
  Write(Dir("ckpt_a_file"), "not a checkpoint");
  EXPECT_THAT(CheckpointWriter::Begin(Dir("ckpt_a_file"), /*replace=*/true).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("is not a checkpoint")));
  std::filesystem::create_directories(Dir("ckpt_other_dir"));
  EXPECT_THAT(CheckpointWriter::Begin(Dir("ckpt_other_dir"), /*replace=*/true).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("is not a checkpoint")));
  // Nor when the file appears while the checkpoint is written.
  auto writer = CheckpointWriter::Begin(Dir("ckpt_raced"), /*replace=*/true);
  ASSERT_THAT(writer.status(), IsOk());
  Write(writer->Path("params.safetensors"), "0123456789");
  Write(Dir("ckpt_raced"), "a file meanwhile");
  EXPECT_THAT(writer->Commit(R"({"step": 7})"), StatusCodeIs(absl::StatusCode::kAlreadyExists));
  std::ifstream in(Dir("ckpt_raced"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "a file meanwhile");
}

}  // namespace
}  // namespace trainyard
