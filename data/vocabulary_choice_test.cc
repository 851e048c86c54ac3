#include "data/vocabulary_choice.h"

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "checkpoint/checkpoint_vocabulary.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string WriteFile(const std::string& name, const std::string& bytes) {
  std::ofstream(Path(name), std::ios::binary | std::ios::trunc) << bytes;
  return Path(name);
}

// A checkpoint carrying `vocabulary` (bytes; empty: none).
std::string Checkpoint(const std::string& name, const std::string& vocabulary, int extra_ids) {
  absl::StatusOr<CheckpointWriter> writer = CheckpointWriter::Begin(Path(name));
  EXPECT_THAT(writer.status(), IsOk());
  nlohmann::ordered_json meta = {{"format", "trainyard.checkpoint"}};
  EXPECT_THAT(WriteCheckpointVocabulary(&*writer, vocabulary, extra_ids, &meta), IsOk());
  EXPECT_THAT(writer->Commit(meta.dump()), IsOk());
  return Path(name);
}

class VocabularyChoiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    mine_ = WriteFile("mine.model", "the user's sentencepiece model");
    copy_ = WriteFile("copy_of_mine.model", "the user's sentencepiece model");
    other_ = WriteFile("other.model", "another sentencepiece model");
    with_ = Checkpoint("with_vocabulary", "the user's sentencepiece model", 100);
    without_ = Checkpoint("without_vocabulary", "", 0);
  }
  static std::string mine_, copy_, other_, with_, without_;
};
std::string VocabularyChoiceTest::mine_, VocabularyChoiceTest::copy_, VocabularyChoiceTest::other_,
    VocabularyChoiceTest::with_, VocabularyChoiceTest::without_;

TEST_F(VocabularyChoiceTest, NoCheckpointTakesTheTasks) {
  absl::StatusOr<VocabularyChoice> c = ChooseVocabulary("", other_, 7, VocabularyUse::kTrain);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->path, other_);
  EXPECT_EQ(c->extra_ids, 7);
  EXPECT_FALSE(c->from_checkpoint);
  EXPECT_FALSE(c->replaces_task);
}

TEST_F(VocabularyChoiceTest, NothingNamedIsTheBundledVocabulary) {
  absl::StatusOr<VocabularyChoice> c = ChooseVocabulary(without_, "", 0, VocabularyUse::kInfer);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_TRUE(absl::EndsWith(c->path, "vocab/digits_to_words.model")) << c->path;
  EXPECT_FALSE(c->from_checkpoint);
}

TEST_F(VocabularyChoiceTest, ACheckpointWithoutAVocabularyUsesTheTasks) {
  for (VocabularyUse use : {VocabularyUse::kTrain, VocabularyUse::kInfer}) {
    absl::StatusOr<VocabularyChoice> c = ChooseVocabulary(without_, other_, 3, use);
    ASSERT_THAT(c.status(), IsOk());
    EXPECT_EQ(c->path, other_);
    EXPECT_EQ(c->extra_ids, 3);
    EXPECT_FALSE(c->from_checkpoint);
  }
}

TEST_F(VocabularyChoiceTest, NoTaskVocabularyTakesTheCheckpointsWithItsExtraIds) {
  absl::StatusOr<VocabularyChoice> c = ChooseVocabulary(with_, "", 0, VocabularyUse::kTrain);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->path, with_ + "/vocabulary.model");
  EXPECT_EQ(c->extra_ids, 100);
  EXPECT_TRUE(c->from_checkpoint);
  EXPECT_FALSE(c->replaces_task);
}

TEST_F(VocabularyChoiceTest, TheSameVocabularyAnywhereIsTheCheckpointsWithTheTasksExtraIds) {
  for (const std::string& task : {mine_, copy_}) {
    absl::StatusOr<VocabularyChoice> c = ChooseVocabulary(with_, task, 5, VocabularyUse::kTrain);
    ASSERT_THAT(c.status(), IsOk());
    EXPECT_EQ(c->path, with_ + "/vocabulary.model");
    EXPECT_EQ(c->extra_ids, 5);
    EXPECT_TRUE(c->from_checkpoint);
    EXPECT_FALSE(c->replaces_task);
  }
}

TEST_F(VocabularyChoiceTest, InferenceReadsAnotherTaskVocabularysExamplesWithTheCheckpoints) {
  absl::StatusOr<VocabularyChoice> c = ChooseVocabulary(with_, other_, 0, VocabularyUse::kInfer);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->path, with_ + "/vocabulary.model");
  EXPECT_TRUE(c->from_checkpoint);
  EXPECT_TRUE(c->replaces_task);
}

TEST_F(VocabularyChoiceTest, TrainingWithAnotherVocabularyIsRefusedNamingBothFiles) {
  EXPECT_THAT(
      ChooseVocabulary(with_, other_, 0, VocabularyUse::kTrain).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "vocabulary: " + other_ + " is not " + with_ +
                   "/vocabulary.model, the vocabulary of the checkpoint's model (its token ids are that "
                   "vocabulary's); training from a checkpoint keeps its vocabulary: use that file (or a copy) in "
                   "place of " +
                   other_ + ", or restore a checkpoint trained with it"));
}

TEST_F(VocabularyChoiceTest, AnUnreadableTaskVocabularyIsNotFoundNamingIt) {
  EXPECT_THAT(ChooseVocabulary(with_, Path("missing.model"), 0, VocabularyUse::kTrain).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(Path("missing.model"))));
}

TEST_F(VocabularyChoiceTest, ADamagedCheckpointVocabularyIsDataLoss) {
  const std::string dir = Checkpoint("damaged", "the user's sentencepiece model", 0);
  std::ofstream(dir + "/vocabulary.model", std::ios::binary | std::ios::trunc) << "something else";
  EXPECT_THAT(ChooseVocabulary(dir, mine_, 0, VocabularyUse::kInfer).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(dir + "/vocabulary.model: ")));
}

}  // namespace
}  // namespace trainyard
