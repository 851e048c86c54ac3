#include "data/hf_tokenizer.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "data/vocabulary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr char kBundled[] = "data/vocab/digits_to_words.model";  // 128 pieces, unigram

std::string NewDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

nlohmann::json ReadJson(const std::string& path) { return nlohmann::json::parse(Read(path)); }

TEST(HfTokenizerTest, WritesT5TokenizerFiles) {
  const std::string dir = NewDir("export");
  ASSERT_THAT(WriteHfTokenizer(kBundled, 3, dir), IsOk());
  EXPECT_EQ(Read(dir + "/spiece.model"), Read(kBundled));

  const nlohmann::json config = ReadJson(dir + "/tokenizer_config.json");
  EXPECT_EQ(config["tokenizer_class"], "T5Tokenizer");
  EXPECT_EQ(config["eos_token"], "</s>");
  EXPECT_EQ(config["unk_token"], "<unk>");
  EXPECT_EQ(config["pad_token"], "<pad>");
  EXPECT_EQ(config["extra_ids"], 3);
  EXPECT_EQ(config["additional_special_tokens"], nlohmann::json({"<extra_id_0>", "<extra_id_1>", "<extra_id_2>"}));
  EXPECT_EQ(ReadJson(dir + "/special_tokens_map.json")["additional_special_tokens"],
            config["additional_special_tokens"]);

  // The fast tokenizer: every piece with its score, then the sentinels
  // (<extra_id_0> last, as ours), and the special tokens by id.
  const nlohmann::json fast = ReadJson(dir + "/tokenizer.json");
  const nlohmann::json& vocab = fast["model"]["vocab"];
  ASSERT_EQ(vocab.size(), 131u);
  EXPECT_EQ(fast["model"]["type"], "Unigram");
  EXPECT_EQ(fast["model"]["unk_id"], 2);
  EXPECT_EQ(vocab[0][0], "<pad>");
  EXPECT_EQ(vocab[1][0], "</s>");
  EXPECT_EQ(vocab[128][0], "<extra_id_2>");
  EXPECT_EQ(vocab[130][0], "<extra_id_0>");
  EXPECT_LT(vocab[3][1].get<double>(), 0.0);
  ASSERT_EQ(fast["added_tokens"].size(), 6u);
  EXPECT_EQ(fast["added_tokens"][5]["content"], "<extra_id_0>");
  EXPECT_EQ(fast["added_tokens"][5]["id"], 130);
  EXPECT_EQ(fast["normalizer"]["normalizers"][0]["type"], "Precompiled");
  EXPECT_EQ(fast["post_processor"]["special_tokens"]["</s>"]["ids"], nlohmann::json({1}));
}

TEST(HfTokenizerTest, AFileThatIsNotAVocabularyIsRefusedNamingIt) {
  const std::string dir = NewDir("not_spm");
  std::ofstream(dir + "/bogus.model") << "not a model";
  EXPECT_THAT(WriteHfTokenizer(dir + "/bogus.model", 0, dir),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(dir + "/bogus.model: not a SentencePiece")));
  EXPECT_THAT(WriteHfTokenizer(dir + "/missing.model", 0, dir), StatusCodeIs(absl::StatusCode::kNotFound));
}

TEST(HfTokenizerTest, ReadsBackWhatItWrote) {
  const std::string dir = NewDir("round_trip");
  ASSERT_THAT(WriteHfTokenizer(kBundled, 7, dir), IsOk());
  absl::StatusOr<HfTokenizer> read = ReadHfTokenizer(dir, "", 256);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(read->spiece, dir + "/spiece.model");
  EXPECT_EQ(read->extra_ids, 7);
}

TEST(HfTokenizerTest, ExtraIdsFromTheSpecialTokensOrHfsDefaultWhereTheyFit) {
  const std::string dir = NewDir("defaults");
  std::ofstream(dir + "/spiece.model", std::ios::binary) << Read(kBundled);
  // No tokenizer_config.json: T5Tokenizer's 100 where the embeddings hold
  // them, else none.
  EXPECT_EQ(ReadHfTokenizer(dir, "", 256)->extra_ids, 100);
  EXPECT_EQ(ReadHfTokenizer(dir, "", 200)->extra_ids, 0);
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"additional_special_tokens": ["<extra_id_0>", "<extra_id_1>", "<other>"]})";
  EXPECT_EQ(ReadHfTokenizer(dir, "", 256)->extra_ids, 2);
}

TEST(HfTokenizerTest, AVocabularyGivenTakesThePlaceOfTheDirectorysOwn) {
  const std::string dir = NewDir("given");
  absl::StatusOr<HfTokenizer> read = ReadHfTokenizer(dir, kBundled, 128);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(read->spiece, kBundled);
  EXPECT_EQ(read->extra_ids, 0);
  EXPECT_EQ(ReadHfTokenizer(dir, "", 128)->spiece, "");  // none of its own
}

TEST(HfTokenizerTest, MoreIdsThanEmbeddingsAreRefusedNamingBothNumbers) {
  const std::string dir = NewDir("too_many");
  std::ofstream(dir + "/spiece.model", std::ios::binary) << Read(kBundled);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"extra_ids": 10})";
  EXPECT_THAT(ReadHfTokenizer(dir, "", 132).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("128 pieces and 10 extra ids (" + dir +
                                 "/tokenizer_config.json) are more ids than the model's 132 embeddings")));
}

}  // namespace
}  // namespace trainyard
