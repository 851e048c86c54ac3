#include "data/vocabulary.h"

#include <fstream>

#include "common/testing/status_matchers.h"
#include "data/digits_to_words.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(DigitsToWordsTest, SpellsNumbers) {
  EXPECT_EQ(NumberToWords(0), "zero");
  EXPECT_EQ(NumberToWords(7), "seven");
  EXPECT_EQ(NumberToWords(13), "thirteen");
  EXPECT_EQ(NumberToWords(40), "forty");
  EXPECT_EQ(NumberToWords(99), "ninety-nine");
  EXPECT_EQ(NumberToWords(100), "one hundred");
  EXPECT_EQ(NumberToWords(115), "one hundred fifteen");
  EXPECT_EQ(NumberToWords(1000), "one thousand");
  EXPECT_EQ(NumberToWords(1234), "one thousand two hundred thirty-four");
  EXPECT_EQ(NumberToWords(20005), "twenty thousand five");
  EXPECT_EQ(NumberToWords(999999), "nine hundred ninety-nine thousand nine hundred ninety-nine");
}

TEST(DigitsToWordsTest, SplitsAreAboutEightyTenTen) {
  int counts[3] = {0, 0, 0};
  for (int64_t n = 0; n <= kDigitsToWordsMaxNumber; ++n) ++counts[static_cast<int>(SplitOfNumber(n))];
  EXPECT_NEAR(counts[0] / 1e6, 0.8, 0.005);
  EXPECT_NEAR(counts[1] / 1e6, 0.1, 0.005);
  EXPECT_NEAR(counts[2] / 1e6, 0.1, 0.005);
}

class VocabularyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string text = ::testing::TempDir() + "/d2w.txt";
    std::ofstream out(text);
    for (int64_t n = 0; n < 20000; ++n) {
      const int64_t number = (n * 7919) % 1000000;
      out << number << "\n" << NumberToWords(number) << "\n";
    }
    out.close();
    prefix_ = new std::string(::testing::TempDir() + "/d2w");
    ASSERT_THAT(TrainVocabulary({text}, 128, *prefix_), IsOk());
  }
  static std::string* prefix_;
};
std::string* VocabularyTest::prefix_ = nullptr;

TEST_F(VocabularyTest, RoundTripsAndHasT5SpecialIds) {
  auto vocab = Vocabulary::Load(*prefix_ + ".model");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ((*vocab)->size(), 128);
  EXPECT_EQ((*vocab)->padded_size(), 128);
  for (const std::string& text : {std::string("1234"), NumberToWords(987654), std::string("zero")}) {
    absl::StatusOr<std::vector<int>> ids = (*vocab)->Encode(text);
    ASSERT_TRUE(ids.ok());
    for (int id : *ids) EXPECT_GT(id, Vocabulary::kUnkId) << text;  // no specials, no unk
    absl::StatusOr<std::string> back = (*vocab)->Decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
  }
}

TEST_F(VocabularyTest, DecodeStopsAtEosSkipsPaddingAndNamesExtraIds) {
  auto vocab = Vocabulary::Load(*prefix_ + ".model", /*extra_ids=*/100);
  ASSERT_TRUE(vocab.ok());
  EXPECT_EQ((*vocab)->size(), 228);
  EXPECT_EQ((*vocab)->padded_size(), 256);
  EXPECT_EQ((*vocab)->ExtraId(0), 227);
  std::vector<int> ids = *(*vocab)->Encode("forty");
  ids.insert(ids.begin(), Vocabulary::kPadId);
  ids.push_back((*vocab)->ExtraId(3));
  ids.push_back(Vocabulary::kEosId);
  ids.push_back(*(*vocab)->Encode("two")->begin());
  EXPECT_EQ(*(*vocab)->Decode(ids), "forty<extra_id_3>");
  EXPECT_THAT((*vocab)->Decode({5000}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the vocabulary of 228")));
}

TEST(VocabularyLoadTest, BadFilesNameThePath) {
  EXPECT_THAT(Vocabulary::Load("/nonexistent.model").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent.model")));
  const std::string junk = ::testing::TempDir() + "/junk.model";
  std::ofstream(junk) << "not a model";
  EXPECT_THAT(Vocabulary::Load(junk).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a SentencePiece model")));
}

}  // namespace
}  // namespace trainyard
