#include "data/iterator.h"

#include <fstream>
#include <set>

#include "common/testing/status_matchers.h"
#include "data/digits_to_words.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr char kVocab[] = "data/vocab/digits_to_words.model";

std::shared_ptr<const Vocabulary> BundledVocab() {
  static std::shared_ptr<const Vocabulary> vocab(std::move(Vocabulary::Load(kVocab)).value());
  return vocab;
}

// A task over `n` in-memory examples "<i>" -> "<i in words>".
Task NumbersTask(int n) {
  Task task;
  task.name = "numbers";
  task.vocabulary = BundledVocab();
  task.source = [n](const std::string&) -> absl::StatusOr<std::unique_ptr<ExampleSource>> {
    std::vector<Example> examples;
    for (int i = 0; i < n; ++i) examples.push_back({{"inputs", std::to_string(i)}, {"targets", NumberToWords(i)}});
    return InMemorySource(std::move(examples));
  };
  return task;
}

std::string Write(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(DigitsToWordsSourceTest, SplitsAreDisjointAndCoverEveryNumber) {
  int64_t total = 0;
  std::set<std::string> seen;
  for (const char* split : {"train", "validation", "test"}) {
    auto source = DigitsToWordsSource(split);
    ASSERT_TRUE(source.ok());
    total += (*source)->size();
    for (int64_t i = 0; i < (*source)->size(); i += 997) {
      EXPECT_TRUE(seen.insert((*(*source)->Get(i))["inputs"]).second);
    }
  }
  EXPECT_EQ(total, kDigitsToWordsMaxNumber + 1);
  EXPECT_THAT(DigitsToWordsSource("dev").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"dev\" is not one of")));
}

TEST(FileSourceTest, TsvAndJsonlWithBadLines) {
  const std::string tsv = Write("a.tsv", "12\ttwelve\nbad line without tab\n7\tseven\n\xff\xfe\tx\n");
  EXPECT_THAT(OpenTsvSource({tsv}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.tsv:2: 1 tab-separated columns, want 2")));
  FileSourceOptions lenient;
  lenient.strict = false;
  auto source = OpenTsvSource({tsv}, lenient);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->size(), 2);
  EXPECT_EQ((*source)->skipped(), 2);  // the tab-less line and the invalid UTF-8
  EXPECT_EQ((*(*source)->Get(1))["targets"], "seven");
  EXPECT_THAT((*source)->Get(2).status(), StatusCodeIs(absl::StatusCode::kOutOfRange));

  const std::string jsonl = Write("a.jsonl", "{\"inputs\": \"3\", \"targets\": \"three\"}\n{\"inputs\": 3}\n");
  EXPECT_THAT(OpenJsonlSource({jsonl}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.jsonl:2: field \"inputs\" is not a string")));
  const std::string jsonl2 = Write("b.jsonl", "{\"inputs\": \"3\"}\n[1]\n");
  auto lenient_json = OpenJsonlSource({jsonl, jsonl2}, lenient);
  ASSERT_TRUE(lenient_json.ok());
  EXPECT_EQ((*lenient_json)->size(), 1);
  EXPECT_EQ((*lenient_json)->skipped(), 3);
  EXPECT_THAT(OpenTsvSource({"/nonexistent.tsv"}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent.tsv")));
  auto empty = OpenTsvSource({Write("empty.tsv", "")});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0);
}

TEST(FileSourceTest, PatternsExpandToShardsInOrder) {
  const std::string dir = ::testing::TempDir();
  Write("shard-00001.tsv", "2\ttwo\n");
  Write("shard-00000.tsv", "0\tzero\n1\tone\n");
  auto source = OpenTsvSource({dir + "/shard-*.tsv"});
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_EQ((*source)->size(), 3);
  EXPECT_EQ((*(*source)->Get(0))["targets"], "zero");
  EXPECT_EQ((*(*source)->Get(2))["targets"], "two");
  EXPECT_THAT(OpenTsvSource({dir + "/nothing-*.tsv"}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no file matches")));
}

TEST(TaskRegistryTest, DuplicatesAndUnknownNames) {
  TaskRegistry registry;
  ASSERT_THAT(RegisterDigitsToWords(kVocab, &registry), IsOk());
  EXPECT_THAT(RegisterDigitsToWords(kVocab, &registry), StatusCodeIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(registry.Get("digits_to_word").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("registered: digits_to_words")));
  absl::StatusOr<const Task*> task = registry.Get("digits_to_words");
  ASSERT_TRUE(task.ok());
  // Tokenize: ids end with EOS and decode back to the text.
  auto source = (*task)->source("validation");
  ASSERT_TRUE(source.ok());
  for (int64_t i = 0; i < 300; ++i) {
    const Example ex = *(*source)->Get(i * 311);
    absl::StatusOr<TokenizedExample> tokens = Tokenize(**task, ex);
    ASSERT_TRUE(tokens.ok());
    EXPECT_EQ(tokens->targets.back(), Vocabulary::kEosId);
    std::vector<int> ids(tokens->targets.begin(), tokens->targets.end());
    EXPECT_EQ(*(*task)->vocabulary->Decode(ids), ex.at("targets"));
  }
}

TEST(TaskIteratorTest, ShardsCoverAnEpochExactlyOnce) {
  const Task task = NumbersTask(100);
  std::multiset<std::string> seen;
  for (int rank = 0; rank < 3; ++rank) {
    IteratorOptions options;
    options.rows = 4;
    options.inputs_length = 8;
    options.targets_length = 16;
    options.pack = false;
    options.repeat = false;
    options.seed = 5;
    options.rank = rank;
    options.world_size = 3;
    auto it = TaskIterator::Create(task, options);
    ASSERT_TRUE(it.ok()) << it.status();
    while (true) {
      absl::StatusOr<ConvertedBatch> batch = (*it)->Next();
      if (absl::IsOutOfRange(batch.status())) break;
      ASSERT_TRUE(batch.ok());
      for (int64_t r = 0; r < batch->rows; ++r) {
        std::vector<int> ids(batch->encoder_input_tokens.begin() + r * 8,
                             batch->encoder_input_tokens.begin() + (r + 1) * 8);
        if (ids[0] != 0) seen.insert(*task.vocabulary->Decode(ids));
      }
    }
  }
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen.count(std::to_string(i)), 1u) << i;
}

bool SameBatch(const ConvertedBatch& a, const ConvertedBatch& b) {
  return a.encoder_input_tokens == b.encoder_input_tokens && a.decoder_target_tokens == b.decoder_target_tokens &&
         a.decoder_input_tokens == b.decoder_input_tokens && a.encoder_segment_ids == b.encoder_segment_ids &&
         a.decoder_segment_ids == b.decoder_segment_ids;
}

TEST(TaskIteratorTest, RestoredIteratorYieldsIdenticalBatchesAcrossEpochs) {
  const Task task = NumbersTask(57);
  IteratorOptions options;
  options.rows = 3;
  options.inputs_length = 10;
  options.targets_length = 24;
  options.seed = 9;
  options.rank = 1;
  options.world_size = 2;
  auto a = TaskIterator::Create(task, options);
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*a)->Next().ok());
  const std::string state = (*a)->State();
  std::vector<ConvertedBatch> expected;
  for (int i = 0; i < 30; ++i) expected.push_back(*(*a)->Next());
  EXPECT_GE((*a)->epoch(), 2);  // the 30 batches cross epoch boundaries
  auto b = TaskIterator::Create(task, options);
  ASSERT_TRUE(b.ok());
  ASSERT_THAT((*b)->Restore(state), IsOk());
  for (int i = 0; i < 30; ++i) EXPECT_TRUE(SameBatch(*(*b)->Next(), expected[i])) << "batch " << i;
  // Back to a position of the epoch it is in (a step put back), and on.
  const std::string again = (*b)->State();
  const int64_t epoch = (*b)->epoch();
  std::vector<ConvertedBatch> next;
  for (int i = 0; i < 2; ++i) next.push_back(*(*b)->Next());
  ASSERT_THAT((*b)->Restore(again), IsOk());
  EXPECT_EQ((*b)->epoch(), epoch);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(SameBatch(*(*b)->Next(), next[i])) << "again " << i;
  EXPECT_THAT((*b)->Restore("0 999"), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*b)->Restore("garbage"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("EPOCH POSITION")));
}

TEST(TaskIteratorTest, OrderDependsOnSeedAndEpoch) {
  const Task task = NumbersTask(50);
  auto first_rows = [&](uint64_t seed, int skip_epochs) {
    IteratorOptions options;
    options.rows = 50;
    options.inputs_length = 4;
    options.targets_length = 16;
    options.pack = false;
    options.seed = seed;
    auto it = std::move(TaskIterator::Create(task, options)).value();
    for (int e = 0; e < skip_epochs; ++e) (void)it->Next();
    return it->Next()->encoder_input_tokens;
  };
  EXPECT_EQ(first_rows(1, 0), first_rows(1, 0));
  EXPECT_NE(first_rows(1, 0), first_rows(2, 0));
  EXPECT_NE(first_rows(1, 0), first_rows(1, 1));
}

// The ids of a batch: the sum of ExampleIdDigest over its rows' examples
// (the numbers task's input is the example's index), and over the ranks of
// any world size the same as one rank's batch of the global size.
TEST(TaskIteratorTest, BatchIdsNameTheGlobalBatchWhateverTheWorldSize) {
  const Task task = NumbersTask(60);
  auto iterator = [&](int rank, int world_size) {
    IteratorOptions options;
    options.rows = 6 / world_size;
    options.inputs_length = 8;
    options.targets_length = 16;
    options.pack = false;
    options.seed = 3;
    options.rank = rank;
    options.world_size = world_size;
    return std::move(TaskIterator::Create(task, options)).value();
  };
  std::unique_ptr<TaskIterator> one = iterator(0, 1);
  std::vector<std::vector<std::unique_ptr<TaskIterator>>> groups(2);
  for (int r = 0; r < 2; ++r) groups[0].push_back(iterator(r, 2));
  for (int r = 0; r < 3; ++r) groups[1].push_back(iterator(r, 3));
  std::set<uint64_t> digests;
  for (int step = 0; step < 14; ++step) {  // 10 batches per epoch: crosses into epoch 1
    const ConvertedBatch batch = *one->Next();
    uint64_t expected = 0;
    for (int64_t r = 0; r < batch.rows; ++r) {
      std::vector<int> ids(batch.encoder_input_tokens.begin() + r * 8, batch.encoder_input_tokens.begin() + r * 8 + 8);
      expected += ExampleIdDigest(step / 10, std::stoll(*task.vocabulary->Decode(ids)), 0);
    }
    EXPECT_EQ(one->last_batch_ids().examples, 6) << step;
    EXPECT_EQ(one->last_batch_ids().digest, expected) << step;
    digests.insert(expected);
    for (auto& group : groups) {
      BatchIds sum;
      for (auto& it : group) {
        ASSERT_TRUE(it->Next().ok());
        sum.examples += it->last_batch_ids().examples;
        sum.digest += it->last_batch_ids().digest;
      }
      EXPECT_EQ(sum.examples, 6) << step;
      EXPECT_EQ(sum.digest, expected) << step << " on " << group.size() << " ranks";
    }
  }
  EXPECT_EQ(digests.size(), 14u);
  // A restored iterator names its next batch as the original did.
  const std::string state = one->State();
  ASSERT_TRUE(one->Next().ok());
  const BatchIds next = one->last_batch_ids();
  std::unique_ptr<TaskIterator> again = iterator(0, 1);
  ASSERT_THAT(again->Restore(state), IsOk());
  ASSERT_TRUE(again->Next().ok());
  EXPECT_EQ(again->last_batch_ids().digest, next.digest);
  // Every part of the id counts, in its place.
  EXPECT_NE(ExampleIdDigest(1, 2, 0), ExampleIdDigest(2, 1, 0));
  EXPECT_NE(ExampleIdDigest(0, 5, 0), ExampleIdDigest(0, 5, 1));
}

// Each rank of W reading only its rows of a global batch of 7 gets exactly
// those rows of the whole batch, through an epoch's short last batch and a
// restore, and names the whole batch as the whole batch does.
TEST(TaskIteratorTest, NextRowsAreThoseRowsOfTheWholeBatch) {
  const Task task = NumbersTask(45);  // 6 full batches and one of 3 rows per epoch
  IteratorOptions options;
  options.rows = 7;
  options.inputs_length = 6;
  options.targets_length = 12;
  options.pack = false;
  options.seed = 11;
  auto whole = std::move(TaskIterator::Create(task, options)).value();
  ASSERT_TRUE(whole->RowsAreExamples());
  for (int world : {1, 2, 3, 7}) {
    std::vector<std::unique_ptr<TaskIterator>> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(std::move(TaskIterator::Create(task, options)).value());
    ASSERT_THAT(whole->Restore("0 0"), IsOk());
    for (int step = 0; step < 16; ++step) {  // into epoch 2
      const std::string state = whole->State();
      const ConvertedBatch expected = *whole->Next();
      for (int r = 0; r < world; ++r) {
        const int64_t first = r * 7 / world, count = (r + 1) * 7 / world - first;
        if (step == 9) ASSERT_THAT(ranks[r]->Restore(state), IsOk());  // as after a regroup
        absl::StatusOr<ConvertedBatch> rows = ranks[r]->NextRows(first, count);
        ASSERT_THAT(rows, IsOk());
        ASSERT_EQ(rows->rows, count);
        auto part = [&](const std::vector<int32_t>& v, int64_t length) {
          return std::vector<int32_t>(v.begin() + first * length, v.begin() + (first + count) * length);
        };
        EXPECT_EQ(rows->encoder_input_tokens, part(expected.encoder_input_tokens, 6)) << step << " " << r;
        EXPECT_EQ(rows->decoder_input_tokens, part(expected.decoder_input_tokens, 12)) << step << " " << r;
        EXPECT_EQ(rows->decoder_target_tokens, part(expected.decoder_target_tokens, 12)) << step << " " << r;
        EXPECT_EQ(ranks[r]->last_batch_ids().examples, whole->last_batch_ids().examples);
        EXPECT_EQ(ranks[r]->last_batch_ids().digest, whole->last_batch_ids().digest);
        EXPECT_EQ(ranks[r]->State(), whole->State()) << step << " " << r;
      }
      EXPECT_EQ(whole->last_batch_ids().examples, step % 7 == 6 ? 3 : 7) << step;
    }
  }
  EXPECT_THAT(whole->NextRows(5, 3), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("within a batch of 7")));
  options.repeat = false;
  auto once = std::move(TaskIterator::Create(task, options)).value();
  for (int step = 0; step < 7; ++step) ASSERT_THAT(once->NextRows(0, 7), IsOk());
  EXPECT_THAT(once->NextRows(0, 7), StatusCodeIs(absl::StatusCode::kOutOfRange));
  options.pack = true;
  auto packed = std::move(TaskIterator::Create(task, options)).value();
  EXPECT_FALSE(packed->RowsAreExamples());
  EXPECT_THAT(packed->NextRows(0, 7), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("packed")));
}

TEST(MixtureTest, RatesAreHonouredAndComponentsKeepTheirPreprocessors) {
  TaskRegistry registry;
  Task small = NumbersTask(100);
  small.name = "small";
  Task big = NumbersTask(1000);
  big.name = "big";
  // "big" only passes numbers >= 500: its preprocessor must still run.
  big.preprocessors.push_back([](Example ex) -> absl::StatusOr<absl::optional<Example>> {
    if (std::stoi(ex["inputs"]) < 500) ex["inputs"] = std::to_string(std::stoi(ex["inputs"]) + 500);
    return absl::optional<Example>(std::move(ex));
  });
  ASSERT_THAT(registry.Add(small), IsOk());
  ASSERT_THAT(registry.Add(big), IsOk());
  ASSERT_THAT(registry.AddMixture("mix", {{"small", 1.0}, {"big", 3.0}}), IsOk());
  EXPECT_THAT(registry.AddMixture("mix", {{"small", 1.0}}), StatusCodeIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(registry.AddMixture("m2", {{"small", 0.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be > 0")));
  EXPECT_THAT(registry.AddMixture("m3", {{"nope", 1.0}}), StatusCodeIs(absl::StatusCode::kNotFound));

  IteratorOptions options;
  options.rows = 1100;
  options.inputs_length = 8;
  options.targets_length = 4;
  options.pack = false;
  options.repeat = false;
  auto it = std::move(TaskIterator::Create(**registry.Get("mix"), options)).value();
  ConvertedBatch batch = *it->Next();
  ASSERT_EQ(batch.examples, 1100);  // an epoch: 100 + 1000 positions
  int from_small = 0;
  for (int64_t r = 0; r < batch.rows; ++r) {
    std::vector<int> ids(batch.encoder_input_tokens.begin() + r * 8, batch.encoder_input_tokens.begin() + (r + 1) * 8);
    const int n = std::stoi(*BundledVocab()->Decode(ids));
    from_small += n < 100;  // "big" examples were all moved to >= 500
  }
  // Rate 1:3 -> a quarter from "small": 275 of 1100 expected; binomial sd ~14.
  EXPECT_NEAR(from_small, 275, 45);
}

TEST(TaskIteratorTest, PreprocessorsDropExamples) {
  Task task = NumbersTask(20);
  task.preprocessors.push_back([](Example ex) -> absl::StatusOr<absl::optional<Example>> {
    if (std::stoi(ex["inputs"]) % 2) return absl::optional<Example>();
    return absl::optional<Example>(std::move(ex));
  });
  IteratorOptions options;
  options.rows = 100;
  options.pack = false;
  options.repeat = false;
  auto undeclared = std::move(TaskIterator::Create(task, options)).value();
  ASSERT_TRUE(undeclared->RowsAreExamples());
  EXPECT_THAT(undeclared->NextRows(0, 10),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("must set drops_examples")));
  task.drops_examples = true;
  auto it = std::move(TaskIterator::Create(task, options)).value();
  EXPECT_FALSE(it->RowsAreExamples());
  ConvertedBatch batch = *it->Next();
  EXPECT_EQ(batch.examples, 10);
  EXPECT_EQ(it->dropped(), 10);
}

}  // namespace
}  // namespace trainyard
