// Tasks and mixtures written in a job spec, as users write them: plain-text
// corpora through T5's span corruption (documents split into segments, never
// truncated), mixtures drawn at their rates with each task's own chain, and
// the iterator's position inside a split document.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/status_matchers.h"
#include "data/bundled.h"
#include "data/iterator.h"
#include "data/task_definition.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/jobspec.h"
#include "spec/jobspec_validator.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// Paragraphs of the licence texts every Debian system ships (base-files).
std::vector<std::string> Documents() {
  std::vector<std::string> out;
  for (const char* path : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"}) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    for (absl::string_view para : absl::StrSplit(text.str(), "\n\n")) {
      std::vector<absl::string_view> words = absl::StrSplit(para, absl::ByAnyChar(" \n\t"), absl::SkipEmpty());
      if (words.size() >= 8) out.push_back(absl::StrJoin(words, " "));
    }
  }
  return out;
}

// The directory the specs' relative paths are read from, as a user's
// working directory: corpus/{train-0,train-1,valid}.txt (Debian's licence
// texts), corpus/spm.model, qa/{train,valid}.tsv.
class SpecTasksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/spec_tasks");
    std::filesystem::create_directories(*dir_ + "/corpus");
    std::filesystem::create_directories(*dir_ + "/qa");
    const std::vector<std::string> docs = Documents();
    ASSERT_GT(docs.size(), 100u);
    std::ofstream train0(*dir_ + "/corpus/train-0.txt"), train1(*dir_ + "/corpus/train-1.txt"),
        valid(*dir_ + "/corpus/valid.txt");
    for (size_t i = 0; i < docs.size(); ++i) (i % 10 == 0 ? valid : i % 2 ? train1 : train0) << docs[i] << "\n\n";
    train0.close();
    train1.close();
    valid.close();
    // The bundled corpus's vocabulary (400 pieces) as the user's
    // (tests/workloads trains one with `trainyard vocab train`).
    std::filesystem::copy_file("data/corpus/spm.model", *dir_ + "/corpus/spm.model",
                               std::filesystem::copy_options::overwrite_existing);
    for (const char* split : {"train", "valid"}) {
      std::ofstream qa(absl::StrCat(*dir_, "/qa/", split, ".tsv"));
      for (int i = 0; i < 50; ++i) qa << "seven " << i << "\tnine " << i << "\n";
    }
  }

  void SetUp() override {
    ASSERT_EQ(chdir(dir_->c_str()), 0);
    ASSERT_THAT(RegisterBundledTasks(&registry_), IsOk());
  }

  // Parses, validates and registers the tasks of `text` (plus a job's
  // fields).
  static JobSpec Normalized(const std::string& text, const std::string& task, int inputs, int targets) {
    absl::StatusOr<JobSpec> spec =
        ParseJobSpec(absl::StrCat("name: \"t\" model { preset: \"tiny\" } batch_size: 8 total_steps: 1 ",
                                  "output_dir: \"/tmp/t\" task: \"", task, "\" feature_lengths { inputs: ", inputs,
                                  " targets: ", targets, " }\n", text),
                     "test");
    EXPECT_THAT(spec, IsOk());
    EXPECT_THAT(ValidateAndNormalize(&*spec), IsOk());
    return *spec;
  }

  // Normalized(), registered in registry_.
  JobSpec Register(const std::string& text, const std::string& task, int inputs, int targets) {
    JobSpec spec = Normalized(text, task, inputs, targets);
    EXPECT_THAT(RegisterSpecTasks(spec, &registry_), IsOk());
    return spec;
  }

  static std::string* dir_;
  TaskRegistry registry_;
};
std::string* SpecTasksTest::dir_ = nullptr;

// The issue's fragment, exactly as a user writes it.
constexpr char kSpanFragment[] = R"pb(
  task_definitions {
    name: "my_corpus_span"
    splits { key: "train" value: "corpus/train-*.txt" }
    splits { key: "validation" value: "corpus/valid.txt" }
    vocabulary: "corpus/spm.model"
    preprocessors { span_corruption { noise_density: 0.15 mean_noise_span_length: 3.0 } }
  }
)pb";

// The document a span-corrupted example came from: each sentinel of the
// inputs replaced by the tokens that follow it in the targets.
std::vector<int> Uncorrupt(const TokenizedExample& ex, const Vocabulary& vocab) {
  auto is_sentinel = [&](int id) { return id >= vocab.ExtraId(vocab.extra_ids() - 1) && id <= vocab.ExtraId(0); };
  std::map<int, std::vector<int>> spans;
  int current = -1;
  for (int id : ex.targets) {
    if (id == Vocabulary::kEosId) break;
    if (is_sentinel(id)) {
      current = id;
    } else {
      spans[current].push_back(id);
    }
  }
  std::vector<int> out;
  for (int id : ex.inputs) {
    if (id == Vocabulary::kEosId) break;
    if (is_sentinel(id)) {
      out.insert(out.end(), spans[id].begin(), spans[id].end());
    } else {
      out.push_back(id);
    }
  }
  return out;
}

TEST_F(SpecTasksTest, PlainTextSourcesSkipBlankLinesAndNameBadOnes) {
  std::ofstream(*dir_ + "/crlf.txt", std::ios::binary) << "first doc\r\n\r\n   \nsecond doc\n";
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenTextSource({*dir_ + "/crlf.txt"});
  ASSERT_THAT(source, IsOk());
  ASSERT_EQ((*source)->size(), 2);
  EXPECT_EQ(*(*source)->Get(0), (Example{{"text", "first doc"}}));
  EXPECT_EQ(*(*source)->Get(1), (Example{{"text", "second doc"}}));
  EXPECT_EQ((*source)->skipped(), 0);
  std::ofstream(*dir_ + "/bad.txt", std::ios::binary) << "fine\nnot \xff utf-8\n";
  EXPECT_THAT(OpenTextSource({*dir_ + "/bad.txt"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.txt:2: invalid UTF-8")));
  EXPECT_THAT(OpenTextSource({*dir_ + "/none-*.txt"}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none-*.txt: no file matches")));
}

TEST_F(SpecTasksTest, SpanCorruptionSplitsDocumentsIntoSegmentsAndLosesNoToken) {
  Register(kSpanFragment, "my_corpus_span", 64, 16);
  const Task* task = *registry_.Get("my_corpus_span");
  const Vocabulary& vocab = *task->vocabulary;
  EXPECT_EQ(vocab.extra_ids(), 100);
  ASSERT_TRUE(task->split_length);
  EXPECT_EQ(task->split_length(64), 70);  // T5's random_spans_helper (spec/task_spec_test.cc)
  // Every document, whatever its length, comes back whole from its segments.
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = task->source("train");
  ASSERT_THAT(source, IsOk());
  int64_t long_documents = 0;
  for (int64_t i = 0; i < (*source)->size(); ++i) {
    Example text = *(*source)->Get(i);
    std::vector<int> want = *vocab.Encode(text.at("text"));
    for (const Preprocessor& preprocess : task->preprocessors) text = **preprocess(text);  // the rekey
    absl::StatusOr<std::vector<TokenizedExample>> segments = TokenizeSegments(*task, text, 64, /*seed=*/i);
    ASSERT_THAT(segments, IsOk());
    ASSERT_EQ(static_cast<int64_t>(segments->size()), (static_cast<int64_t>(want.size()) + 69) / 70) << i;
    std::vector<int> got;
    for (size_t s = 0; s < segments->size(); ++s) {
      const TokenizedExample& seg = (*segments)[s];
      EXPECT_LE(seg.inputs.size(), 64u);
      EXPECT_LE(seg.targets.size(), 16u);
      if (s + 1 < segments->size()) {  // a full segment fills the inputs exactly
        EXPECT_EQ(seg.inputs.size(), 64u);
        EXPECT_EQ(seg.targets.size(), 16u);
      }
      const std::vector<int> back = Uncorrupt(seg, vocab);
      got.insert(got.end(), back.begin(), back.end());
    }
    EXPECT_EQ(got, want) << "document " << i;
    long_documents += segments->size() > 1;
  }
  EXPECT_GT(long_documents, 20);
  // Batches of the split: nothing truncated.
  IteratorOptions options;
  options.rows = 4;
  options.inputs_length = 64;
  options.targets_length = 16;
  auto it = TaskIterator::Create(*task, options);
  ASSERT_THAT(it, IsOk());
  for (int b = 0; b < 20; ++b) {
    absl::StatusOr<ConvertedBatch> batch = (*it)->Next();
    ASSERT_THAT(batch, IsOk());
    EXPECT_EQ(batch->truncated_examples, 0);
  }
}

TEST_F(SpecTasksTest, ResumesInsideASplitDocument) {
  Register(kSpanFragment, "my_corpus_span", 64, 16);
  const Task* task = *registry_.Get("my_corpus_span");
  IteratorOptions options;
  options.rows = 3;
  options.inputs_length = 64;
  options.targets_length = 16;
  options.pack = false;
  options.seed = 5;
  auto a = std::move(TaskIterator::Create(*task, options)).value();
  std::string state;
  for (int b = 0; b < 200 && a->segment() == 0; ++b) ASSERT_THAT(a->Next(), IsOk());
  ASSERT_GT(a->segment(), 0) << "no batch ended inside a document";
  state = a->State();
  EXPECT_EQ(std::count(state.begin(), state.end(), ' '), 2) << state;
  auto b = std::move(TaskIterator::Create(*task, options)).value();
  ASSERT_THAT(b->Restore(state), IsOk());
  for (int k = 0; k < 5; ++k) {
    const ConvertedBatch want = *a->Next();
    const ConvertedBatch got = *b->Next();
    EXPECT_EQ(got.encoder_input_tokens, want.encoder_input_tokens) << k;
    EXPECT_EQ(got.decoder_target_tokens, want.decoder_target_tokens) << k;
  }
  EXPECT_EQ(a->State(), b->State());
  // States written before segments existed still read.
  EXPECT_THAT(ParseIteratorState("3 17"), IsOk());
  EXPECT_EQ(ParseIteratorState("3 17 2")->segment, 2);
  EXPECT_THAT(ParseIteratorState("3 17 2 1").status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseIteratorState("3 17 -1").status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
}

// The mixture fragment, with my_qa a TSV task of the user's.
constexpr char kMixtureFragment[] = R"pb(
  task_definitions {
    name: "my_qa"
    splits { key: "train" value: "qa/train.tsv" }
    splits { key: "validation" value: "qa/valid.tsv" }
  }
  mixture_definitions {
    name: "mix"
    tasks { name: "digits_to_words" rate: 1.0 }
    tasks { name: "my_qa" rate: 3.0 }
  }
)pb";

// The share of my_qa's examples among `batches` batches of 64 rows.
double QaShare(const Task& task, int batches) {
  IteratorOptions options;
  options.rows = 64;
  options.inputs_length = 16;
  options.targets_length = 16;
  options.pack = false;
  auto it = std::move(TaskIterator::Create(task, options)).value();
  int64_t qa = 0, all = 0;
  for (int b = 0; b < batches; ++b) {
    const ConvertedBatch batch = *it->Next();
    for (int64_t r = 0; r < batch.rows; ++r) {
      std::vector<int> row(batch.encoder_input_tokens.begin() + r * 16,
                           batch.encoder_input_tokens.begin() + (r + 1) * 16);
      qa += absl::StartsWith(*task.vocabulary->Decode(row), "seven");
      ++all;
    }
  }
  return static_cast<double>(qa) / static_cast<double>(all);
}

TEST_F(SpecTasksTest, MixturesDrawAtTheirRatesOverALongStream) {
  Register(kMixtureFragment, "mix", 16, 16);
  // 19,200 examples, several epochs of the mixture: 3/4 from my_qa (three
  // standard deviations: 0.0094).
  EXPECT_NEAR(QaShare(**registry_.Get("mix"), 300), 0.75, 0.0094);
}

TEST_F(SpecTasksTest, NestedMixturesAreFlattenedWhateverTheirOrder) {
  Register(absl::StrCat(kMixtureFragment, R"pb(
             mixture_definitions {
               name: "outer"
               tasks { name: "mix" rate: 1.0 }
               tasks { name: "digits_to_words" rate: 1.0 }
             }
           )pb"),
           "outer", 16, 16);
  const Task* outer = *registry_.Get("outer");
  ASSERT_EQ(outer->components.size(), 2u);
  EXPECT_EQ(outer->components[0].first->name, "digits_to_words");
  EXPECT_DOUBLE_EQ(outer->components[0].second, 0.625);  // 1/2 * 1/4 + 1/2
  EXPECT_DOUBLE_EQ(outer->components[1].second, 0.375);  // 1/2 * 3/4
  EXPECT_NEAR(QaShare(*outer, 300), 0.375, 0.0105);
  // A mixture listed before the mixture it contains.
  TaskRegistry registry;
  ASSERT_THAT(RegisterBundledTasks(&registry), IsOk());
  JobSpec spec;
  const JobSpec fragment = Normalized(kMixtureFragment, "mix", 16, 16);
  *spec.add_task_definitions() = fragment.task_definitions(0);
  auto* first = spec.add_mixture_definitions();
  first->set_name("second_level");
  auto* c = first->add_tasks();
  c->set_name("mix");
  c->set_rate(1);
  *spec.add_mixture_definitions() = fragment.mixture_definitions(0);
  EXPECT_THAT(RegisterSpecTasks(spec, &registry), IsOk());
  EXPECT_THAT(registry.Get("second_level"), IsOk());
}

TEST_F(SpecTasksTest, EachExampleOfAMixtureGoesThroughItsOwnTasksChain) {
  Register(absl::StrCat(kSpanFragment, R"pb(
             task_definitions {
               name: "plain_qa"
               splits { key: "train" value: "qa/train.tsv" }
               vocabulary: "corpus/spm.model"
               extra_ids: 100
             }
             mixture_definitions {
               name: "span_and_qa"
               tasks { name: "my_corpus_span" rate: 1.0 }
               tasks { name: "plain_qa" rate: 1.0 }
             }
           )pb"),
           "span_and_qa", 64, 16);
  const Task* mix = *registry_.Get("span_and_qa");
  const Vocabulary& vocab = *mix->vocabulary;
  IteratorOptions options;
  options.rows = 16;
  options.inputs_length = 64;
  options.targets_length = 16;
  options.pack = false;
  auto it = std::move(TaskIterator::Create(*mix, options)).value();
  int corrupted = 0, questions = 0;
  for (int b = 0; b < 10; ++b) {
    const ConvertedBatch batch = *it->Next();
    EXPECT_EQ(batch.truncated_examples, 0);
    for (int64_t r = 0; r < batch.rows; ++r) {
      std::vector<int> row(batch.encoder_input_tokens.begin() + r * 64,
                           batch.encoder_input_tokens.begin() + (r + 1) * 64);
      const bool sentinel = std::any_of(row.begin(), row.end(), [&](int id) { return id >= vocab.ExtraId(99); });
      const bool question = absl::StartsWith(*vocab.Decode(row), "seven");
      EXPECT_NE(sentinel, question) << "row " << r << ": " << *vocab.Decode(row);
      corrupted += sentinel;
      questions += question;
    }
  }
  EXPECT_GT(corrupted, 40);
  EXPECT_GT(questions, 40);
}

}  // namespace
}  // namespace trainyard
