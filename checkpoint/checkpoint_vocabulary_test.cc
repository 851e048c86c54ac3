#include "checkpoint/checkpoint_vocabulary.h"

#include <fstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

std::string Dir(const std::string& name) { return ::testing::TempDir() + "/" + name; }

// A checkpoint with `vocabulary` (bytes; empty: none) and `extra_ids`.
std::string Commit(const std::string& name, const std::string& vocabulary, int extra_ids) {
  absl::StatusOr<CheckpointWriter> writer = CheckpointWriter::Begin(Dir(name));
  EXPECT_THAT(writer.status(), IsOk());
  nlohmann::ordered_json meta = {{"format", "trainyard.checkpoint"}, {"step", 3}};
  EXPECT_THAT(WriteCheckpointVocabulary(&*writer, vocabulary, extra_ids, &meta), IsOk());
  EXPECT_THAT(writer->Commit(meta.dump()), IsOk());
  return Dir(name);
}

TEST(CheckpointVocabularyTest, WrittenAndReadBack) {
  const std::string dir = Commit("with", "spm-bytes", 100);
  absl::StatusOr<CheckpointVocabulary> vocab = ReadCheckpointVocabulary(dir);
  ASSERT_THAT(vocab.status(), IsOk());
  EXPECT_EQ(vocab->path, dir + "/vocabulary.model");
  EXPECT_EQ(vocab->extra_ids, 100);
  EXPECT_EQ(*ReadVocabularyFile(vocab->path), "spm-bytes");
}

TEST(CheckpointVocabularyTest, NoneIsAnEmptyPath) {
  absl::StatusOr<CheckpointVocabulary> vocab = ReadCheckpointVocabulary(Commit("without", "", 0));
  ASSERT_THAT(vocab.status(), IsOk());
  EXPECT_EQ(vocab->path, "");
  EXPECT_EQ(vocab->extra_ids, 0);
}

TEST(CheckpointVocabularyTest, OlderMetadataWithoutTheFieldsHasNone) {
  absl::StatusOr<CheckpointWriter> writer = CheckpointWriter::Begin(Dir("older"));
  ASSERT_THAT(writer.status(), IsOk());
  ASSERT_THAT(writer->Commit(R"({"format": "trainyard.checkpoint", "step": 1})"), IsOk());
  absl::StatusOr<CheckpointVocabulary> vocab = ReadCheckpointVocabulary(Dir("older"));
  ASSERT_THAT(vocab.status(), IsOk());
  EXPECT_EQ(vocab->path, "");
}

TEST(CheckpointVocabularyTest, AlteredVocabularyIsDataLossNamingTheFile) {
  const std::string dir = Commit("altered", "spm-bytes", 0);
  std::ofstream(dir + "/vocabulary.model", std::ios::binary | std::ios::trunc) << "spm-BYTES";
  EXPECT_THAT(ReadCheckpointVocabulary(dir).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("vocabulary.model: SHA-256 mismatch")));
}

TEST(CheckpointVocabularyTest, MetadataNamingAnotherFileIsDataLoss) {
  absl::StatusOr<CheckpointWriter> writer = CheckpointWriter::Begin(Dir("other_name"));
  ASSERT_THAT(writer.status(), IsOk());
  ASSERT_THAT(writer->Commit(R"({"vocabulary": "../../etc/passwd"})"), IsOk());
  EXPECT_THAT(ReadCheckpointVocabulary(Dir("other_name")).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("a checkpoint's vocabulary is \"vocabulary.model\"")));
}

TEST(CheckpointVocabularyTest, NotACheckpointIsNotFound) {
  EXPECT_THAT(ReadCheckpointVocabulary(Dir("nothing_here")).status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

TEST(CheckpointVocabularyTest, NegativeExtraIdsAreRefused) {
  absl::StatusOr<CheckpointWriter> writer = CheckpointWriter::Begin(Dir("negative"));
  ASSERT_THAT(writer.status(), IsOk());
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  EXPECT_THAT(WriteCheckpointVocabulary(&*writer, "x", -1, &meta),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be >= 0")));
  writer->Abort();
}

}  // namespace
}  // namespace trainyard
