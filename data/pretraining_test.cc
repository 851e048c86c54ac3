// Pretraining-style tasks over real text: the GNU GPL v3 and Apache 2.0
// licence texts that every Debian system ships (base-files), whose licences
// permit verbatim copies, split into paragraphs, rekeyed to "targets", and
// turned into T5's span-corruption objective (or a prefix LM) on the fly.
#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/testing/status_matchers.h"
#include "data/iterator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

std::vector<Example> Paragraphs() {
  std::vector<Example> out;
  for (const char* path : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"}) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    for (absl::string_view para : absl::StrSplit(text.str(), "\n\n")) {
      std::vector<absl::string_view> words = absl::StrSplit(para, absl::ByAnyChar(" \n\t"), absl::SkipEmpty());
      if (words.size() >= 8) out.push_back({{"text", absl::StrJoin(words, " ")}});
    }
  }
  return out;
}

class PretrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::vector<Example> paragraphs = Paragraphs();
    ASSERT_GT(paragraphs.size(), 100u);
    const std::string corpus = ::testing::TempDir() + "/licences.txt";
    std::ofstream out(corpus);
    for (const Example& p : paragraphs) out << p.at("text") << "\n";
    out.close();
    const std::string prefix = ::testing::TempDir() + "/licences";
    ASSERT_THAT(TrainVocabulary({corpus}, 400, prefix), IsOk());
    vocab_ = new std::shared_ptr<const Vocabulary>(
        std::move(Vocabulary::Load(prefix + ".model", /*extra_ids=*/100)).value());
  }

  Task SpanCorruptionTask() const {
    Task task;
    task.name = "licences_span_corruption";
    task.vocabulary = *vocab_;
    task.source = [](const std::string&) -> absl::StatusOr<std::unique_ptr<ExampleSource>> {
      return InMemorySource(Paragraphs());
    };
    task.preprocessors.push_back(Rekey({{"targets", "text"}}));
    task.token_preprocessors.push_back(SpanCorruption(**vocab_));
    return task;
  }

  static std::shared_ptr<const Vocabulary>* vocab_;
};
std::shared_ptr<const Vocabulary>* PretrainingTest::vocab_ = nullptr;

TEST_F(PretrainingTest, SpanCorruptionBatchesHaveSentinelsAndTheConfiguredNoise) {
  const Task task = SpanCorruptionTask();
  IteratorOptions options;
  options.rows = 8;
  options.inputs_length = 1024;  // the longest paragraphs are ~900 tokens
  options.targets_length = 256;
  options.seed = 4;
  auto it = std::move(TaskIterator::Create(task, options)).value();
  const int first_sentinel = (*vocab_)->ExtraId(0);
  const int last_sentinel = (*vocab_)->ExtraId(99);
  auto is_sentinel = [&](int id) { return id >= last_sentinel && id <= first_sentinel; };
  int64_t noise = 0, kept = 0, sentinels_in = 0, sentinels_out = 0;
  for (int b = 0; b < 10; ++b) {
    ConvertedBatch batch = *it->Next();
    ASSERT_EQ(batch.truncated_examples, 0);  // lengths chosen to fit
    for (int32_t id : batch.encoder_input_tokens) {
      if (is_sentinel(id))
        ++sentinels_in;
      else if (id > Vocabulary::kEosId)
        ++kept;
    }
    for (int32_t id : batch.decoder_target_tokens) {
      if (is_sentinel(id))
        ++sentinels_out;
      else if (id > Vocabulary::kEosId)
        ++noise;
    }
  }
  EXPECT_EQ(sentinels_in, sentinels_out);  // every span marked on both sides
  EXPECT_GT(sentinels_in, 100);
  EXPECT_NEAR(static_cast<double>(noise) / (noise + kept), 0.15, 0.01);
  EXPECT_NEAR(static_cast<double>(noise) / sentinels_out, 3.0, 0.5);
}

TEST_F(PretrainingTest, CorruptionIsAFunctionOfSeedEpochAndExample) {
  const Task task = SpanCorruptionTask();
  IteratorOptions options;
  options.rows = 4;
  options.inputs_length = 256;
  options.targets_length = 96;
  options.seed = 8;
  auto a = std::move(TaskIterator::Create(task, options)).value();
  auto b = std::move(TaskIterator::Create(task, options)).value();
  (void)a->Next();
  const std::string state = a->State();
  const ConvertedBatch next = *a->Next();
  ASSERT_THAT(b->Restore(state), IsOk());
  const ConvertedBatch again = *b->Next();
  EXPECT_EQ(next.encoder_input_tokens, again.encoder_input_tokens);
  EXPECT_EQ(next.decoder_target_tokens, again.decoder_target_tokens);
  options.seed = 9;
  auto c = std::move(TaskIterator::Create(task, options)).value();
  EXPECT_NE(c->Next()->encoder_input_tokens, next.encoder_input_tokens);
}

TEST_F(PretrainingTest, PrefixLmSplitsTheTextIntoInputsAndTargets) {
  Task task;
  task.name = "licences_prefix_lm";
  task.vocabulary = *vocab_;
  task.add_eos = false;
  task.token_preprocessors.push_back(PrefixLm());
  std::mt19937_64 rng(1);
  const std::string text = Paragraphs()[3].at("text");
  absl::StatusOr<TokenizedExample> ex = Tokenize(task, {{"targets", text}}, &rng);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_FALSE(ex->inputs.empty());
  EXPECT_FALSE(ex->targets.empty());
  std::vector<int> all(ex->inputs.begin(), ex->inputs.end());
  all.insert(all.end(), ex->targets.begin(), ex->targets.end());
  EXPECT_EQ(*(*vocab_)->Decode(all), text);
}

TEST_F(PretrainingTest, TokenPreprocessorsByName) {
  const std::vector<int32_t> ids = [] {
    std::vector<int> v = *(*vocab_)->Encode(Paragraphs()[5].at("text"));
    return std::vector<int32_t>(v.begin(), v.end());
  }();
  for (const auto& [name, built] : std::vector<std::pair<std::string, TokenPreprocessor>>{
           {"span_corruption", SpanCorruption(**vocab_)}, {"prefix_lm", PrefixLm()}}) {
    absl::StatusOr<TokenPreprocessor> named = TokenPreprocessorByName(name, **vocab_);
    ASSERT_THAT(named.status(), IsOk());
    std::mt19937_64 a(7), b(7);
    TokenizedExample in;
    in.targets = ids;
    const TokenizedExample x = *(*named)(in, &a);
    const TokenizedExample y = *built(in, &b);
    EXPECT_EQ(x.inputs, y.inputs) << name;
    EXPECT_EQ(x.targets, y.targets) << name;
  }
  EXPECT_THAT(TokenPreprocessorByName("span_corrupt", **vocab_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("token preprocessor \"span_corrupt\" is not one of: span_corruption, "
                                            "prefix_lm")));
  absl::StatusOr<std::unique_ptr<Vocabulary>> plain = Vocabulary::Load((*vocab_)->path());
  ASSERT_THAT(plain.status(), IsOk());
  EXPECT_THAT(TokenPreprocessorByName("span_corruption", **plain).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("has no extra ids")));
}

// The iterator seeds example i of epoch e with ExampleSeed(seed, e, i).
TEST_F(PretrainingTest, TheIteratorSeedsEachExampleWithExampleSeed) {
  const Task task = SpanCorruptionTask();
  IteratorOptions options;
  options.rows = 1;
  options.inputs_length = 512;
  options.targets_length = 512;
  options.pack = false;
  options.shuffle = false;
  options.seed = 3;
  auto it = std::move(TaskIterator::Create(task, options)).value();
  const std::vector<Example> paragraphs = Paragraphs();
  for (int64_t i = 0; i < 3; ++i) {
    const ConvertedBatch batch = *it->Next();
    Example rekeyed = {{"targets", paragraphs[i].at("text")}};
    const TokenizedExample expected = (*TokenizeSegments(task, rekeyed, 512, ExampleSeed(3, 0, i)))[0];
    ASSERT_LE(expected.inputs.size(), 512u);
    ASSERT_LE(expected.targets.size(), 512u);
    EXPECT_EQ(std::vector<int32_t>(batch.encoder_input_tokens.begin(),
                                   batch.encoder_input_tokens.begin() + expected.inputs.size()),
              expected.inputs)
        << i;
    EXPECT_EQ(std::vector<int32_t>(batch.decoder_target_tokens.begin(),
                                   batch.decoder_target_tokens.begin() + expected.targets.size()),
              expected.targets)
        << i;
  }
}

// The iterator over split documents without a job spec (so that it also
// runs under the sanitizers; data/spec_tasks_test covers the spec's chains).
TEST_F(PretrainingTest, SplitDocumentsResumeAtTheirNextSegment) {
  Task task = SpanCorruptionTask();
  task.split_length = [](int64_t inputs_length) { return inputs_length + 6; };  // 70 for 64
  IteratorOptions options;
  options.rows = 3;
  options.inputs_length = 64;
  options.targets_length = 16;
  options.pack = false;
  options.seed = 2;
  auto a = std::move(TaskIterator::Create(task, options)).value();
  for (int b = 0; b < 200 && a->segment() == 0; ++b) ASSERT_TRUE(a->Next().ok());
  ASSERT_GT(a->segment(), 0) << "no batch ended inside a document";
  auto b = std::move(TaskIterator::Create(task, options)).value();
  ASSERT_THAT(b->Restore(a->State()), IsOk());
  for (int k = 0; k < 5; ++k) {
    const ConvertedBatch want = *a->Next();
    const ConvertedBatch got = *b->Next();
    EXPECT_EQ(got.encoder_input_tokens, want.encoder_input_tokens) << k;
    EXPECT_EQ(got.decoder_target_tokens, want.decoder_target_tokens) << k;
    EXPECT_EQ(got.truncated_examples, 0);
  }
  // Every segment of a long paragraph is at most 70 tokens before corruption.
  const std::string text = Paragraphs()[3].at("text");
  absl::StatusOr<std::vector<TokenizedExample>> segments =
      TokenizeSegments(task, {{"targets", text}}, options.inputs_length, /*seed=*/1);
  ASSERT_TRUE(segments.ok()) << segments.status();
  const size_t tokens = (*vocab_)->Encode(text)->size();
  EXPECT_EQ(segments->size(), (tokens + 69) / 70);
}

TEST(RekeyTest, RenamesAndNamesAMissingFeature) {
  Preprocessor rekey = Rekey({{"targets", "text"}});
  absl::StatusOr<absl::optional<Example>> out = rekey({{"text", "abc"}, {"id", "7"}});
  ASSERT_TRUE(out.ok() && out->has_value());
  EXPECT_EQ(**out, (Example{{"targets", "abc"}}));
  EXPECT_THAT(rekey({{"body", "x"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("no feature \"text\"")));
}

TEST(TextStepTest, TranslateAndSummarizeFormatAsT5Does) {
  Preprocessor translate = Translate("en", "English", "de", "German");
  absl::StatusOr<absl::optional<Example>> out =
      translate({{"en", "That is good."}, {"de", "Das ist gut."}, {"id", "7"}});
  ASSERT_TRUE(out.ok() && out->has_value()) << out.status();
  EXPECT_EQ(**out, (Example{{"inputs", "translate English to German: That is good."}, {"targets", "Das ist gut."}}));
  EXPECT_THAT(translate({{"en", "x"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("translate: no feature \"de\"")));

  Preprocessor summarize = Summarize("article", "highlights");
  out = summarize({{"article", "A  long\tarticle."}, {"highlights", "Short."}});
  ASSERT_TRUE(out.ok() && out->has_value()) << out.status();
  // Joined with one space; the article's own whitespace is kept, as T5's.
  EXPECT_EQ(**out, (Example{{"inputs", "summarize: A  long\tarticle."}, {"targets", "Short."}}));
  EXPECT_THAT(summarize({{"highlights", "x"}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("summarize: no feature \"article\"")));
}

}  // namespace
}  // namespace trainyard
