#include "spec/task_spec.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "spec/jobspec.h"
#include "spec/jobspec_validator.h"

namespace trainyard {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// The fragments of a pretraining spec as users write them.
constexpr char kSpanTask[] = R"pb(
  task_definitions {
    name: "my_corpus_span"
    splits { key: "train" value: "corpus/train-*.txt" }
    splits { key: "validation" value: "corpus/valid.txt" }
    vocabulary: "corpus/spm.model"
    preprocessors { span_corruption { noise_density: 0.15 mean_noise_span_length: 3.0 } }
  }
)pb";

JobSpec Spec(const std::string& extra, const std::string& task = "my_corpus_span") {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(absl::StrCat(R"pb(
                                                             name: "pretrain"
                                                             model { preset: "tiny" }
                                                             feature_lengths { inputs: 512 targets: 114 }
                                                             batch_size: 8
                                                             total_steps: 10
                                                             output_dir: "/tmp/trainyard/pretrain"
                                                           )pb",
                                                           "task: \"", task, "\"\n", extra),
                                              "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

absl::Status Validate(JobSpec spec) { return ValidateAndNormalize(&spec); }

TEST(SpanCorruptionLengthsTest, T5sRandomSpansHelperNumbers) {
  // T5's published figures: inputs 512 at noise 0.15 and mean span 3 come
  // from 568-token segments and need 114 target tokens.
  const SpanCorruptionLengths t5 = SpanCorruptionLengthsFor(512, 0.15, 3.0, /*eos=*/1);
  EXPECT_EQ(t5.segment_tokens, 568);
  EXPECT_EQ(t5.noise_tokens, 85);  // round(568 * 0.15) = round(85.2)
  EXPECT_EQ(t5.spans, 28);         // round(85 / 3)
  EXPECT_EQ(t5.inputs, 512);       // 568 - 85 + 28 + 1
  EXPECT_EQ(t5.targets, 114);      // 85 + 28 + 1
  // inputs 64: 70 tokens (noise round(10.5) = 11, 4 spans: 70 - 11 + 4 + 1 =
  // 64); 71 would make 65.
  const SpanCorruptionLengths small = SpanCorruptionLengthsFor(64, 0.15, 3.0, 1);
  EXPECT_EQ(small.segment_tokens, 70);
  EXPECT_EQ(small.targets, 16);
  EXPECT_EQ(SpanCorruptionLengthsOf(71, 0.15, 3.0, 1).inputs, 65);
  // Without EOS, one token more of each.
  EXPECT_EQ(SpanCorruptionLengthsFor(512, 0.15, 3.0, 0).segment_tokens, 569);
}

TEST(SegmentLengthTest, FollowsTheChain) {
  TaskDefinition def;
  EXPECT_EQ(SegmentLength(def, 512), 0);  // no splitting
  def.add_preprocessors()->mutable_prefix_lm();
  EXPECT_EQ(SegmentLength(def, 512), 511);  // inputs less the EOS
  def.set_add_eos(false);
  EXPECT_EQ(SegmentLength(def, 512), 512);
  TaskDefinition span;
  span.add_preprocessors()->mutable_span_corruption();
  EXPECT_EQ(SegmentLength(span, 512), 568);
  EXPECT_EQ(ExtraIds(span), 100);
  EXPECT_EQ(ExtraIds(def), 0);
  TaskDefinition fixed;
  fixed.add_preprocessors()->mutable_split_tokens()->set_max_tokens_per_segment(300);
  fixed.add_preprocessors()->mutable_span_corruption();
  EXPECT_EQ(SegmentLength(fixed, 512), 300);
  TaskDefinition to_inputs;
  to_inputs.add_preprocessors()->mutable_split_tokens();
  EXPECT_EQ(SegmentLength(to_inputs, 512), 511);
}

TEST(TaskValidationTest, TheSpanCorruptionFragmentValidatesAndGetsT5sRekey) {
  JobSpec spec = Spec(kSpanTask);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  const TaskDefinition& def = spec.task_definitions(0);
  ASSERT_EQ(def.preprocessors_size(), 2);
  ASSERT_TRUE(def.preprocessors(0).has_rekey());
  EXPECT_THAT(def.preprocessors(0).rekey().key_map(), ElementsAre(Pair("targets", "text")));
  EXPECT_FLOAT_EQ(def.preprocessors(1).span_corruption().noise_density(), 0.15f);
  EXPECT_EQ(def.extra_ids(), 100);
  EXPECT_THAT(spec.eval().tasks(), ElementsAre("my_corpus_span"));
  // Normalising again changes nothing.
  JobSpec again = spec;
  ASSERT_THAT(ValidateAndNormalize(&again), IsOk());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(spec, again));
}

TEST(TaskValidationTest, UnknownTaskNamesAreRefusedListingTheKnownOnes) {
  EXPECT_THAT(Validate(Spec(kSpanTask, "c4_v220_span_corruption")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("task: \"c4_v220_span_corruption\" is not a known task or mixture; known: "
                                 "digits_to_words, my_corpus_span (bundled tasks, and task_definitions and "
                                 "mixture_definitions of this spec)")));
  JobSpec spec = Spec(kSpanTask);
  spec.mutable_eval()->add_tasks("my_corpus_span");
  spec.mutable_eval()->add_tasks("wmt_t2t_ende_v003");
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("eval.tasks[1]: \"wmt_t2t_ende_v003\" is not a known task")));
  EXPECT_THAT(Validate(Spec("", "digits_to_words")), IsOk());
}

TEST(TaskValidationTest, FeatureLengthsMustHoldWhatSpanCorruptionMakes) {
  JobSpec spec = Spec(kSpanTask);
  spec.mutable_feature_lengths()->set_targets(100);
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("feature_lengths.targets: 100 is shorter than the 114 tokens span_corruption of task "
                                 "my_corpus_span makes of a 568-token segment (inputs 512); set targets to at least "
                                 "114")));
  spec = Spec(kSpanTask);
  spec.mutable_task_definitions(0)->set_extra_ids(10);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("task_definitions[0].extra_ids: 10: span_corruption makes up to 28 "
                                                 "spans of a 568-token segment, one sentinel id each")));
  spec = Spec(kSpanTask);
  spec.mutable_task_definitions(0)->set_extra_ids(0);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("task_definitions[0].extra_ids: 0; span_corruption "
                                                 "replaces spans by sentinel ids")));
}

TEST(TaskValidationTest, ChainsAreCheckedStepByStep) {
  auto with_chain = [](const std::string& splits, const std::string& chain) {
    return Spec(absl::StrCat("task_definitions { name: \"t\" ", splits, " ", chain, " }"), "t");
  };
  const std::string tsv = R"(splits { key: "train" value: "a.tsv" })";
  const std::string txt = R"(splits { key: "train" value: "a.txt" })";
  EXPECT_THAT(Validate(with_chain(tsv,
                                  "preprocessors { prefix_lm {} } preprocessors { rekey { key_map { key: "
                                  "\"targets\" value: \"inputs\" } } }")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("task_definitions[0].preprocessors[1].rekey: renames text features, so it comes "
                                 "before split_tokens, span_corruption and prefix_lm")));
  EXPECT_THAT(Validate(with_chain(tsv, "preprocessors { prefix_lm {} } preprocessors { span_corruption {} }")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("preprocessors[1].span_corruption: the chain already has prefix_lm")));
  EXPECT_THAT(Validate(with_chain(tsv, "preprocessors { span_corruption {} } preprocessors { split_tokens {} }")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("preprocessors[1].split_tokens: comes after span_corruption; put it before")));
  EXPECT_THAT(Validate(with_chain(txt, "")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("task_definitions[0].preprocessors: the examples reach the model with targets; they "
                                 "need inputs and targets")));
  EXPECT_THAT(
      Validate(with_chain(txt,
                          "preprocessors { rekey { key_map { key: \"targets\" value: \"body\" } } } "
                          "preprocessors { prefix_lm {} }")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("preprocessors[0].rekey.key_map[targets]: \"body\" is not a feature of the examples here; "
                         "they have: text")));
  EXPECT_THAT(
      Validate(with_chain(R"(splits { key: "train" value: "a.txt" } splits { key: "validation" value: "b.tsv" })",
                          "preprocessors { prefix_lm {} }")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("task_definitions[0].splits: mixes plain text")));
  EXPECT_THAT(
      Validate(with_chain(tsv, "preprocessors { span_corruption { noise_density: 1.5 } }")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("preprocessors[0].span_corruption.noise_density: 1.5 is out of range; allowed: (0, 1)")));
  EXPECT_THAT(
      Validate(with_chain(tsv, "preprocessors {}")),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "preprocessors[0]: set one of rekey, translate, summarize, split_tokens, span_corruption, prefix_lm")));
  EXPECT_THAT(Validate(with_chain(txt,
                                  "preprocessors { split_tokens { max_tokens_per_segment: 100 } } "
                                  "preprocessors { prefix_lm {} }")),
              IsOk());
}

constexpr char kMixtureTasks[] = R"pb(
  task_definitions {
    name: "my_qa"
    splits { key: "train" value: "qa/train.tsv" }
    splits { key: "validation" value: "qa/valid.tsv" }
  }
)pb";

TEST(TaskValidationTest, TranslateAndSummarizeReadTheirFeaturesAndComeBeforeTokenSteps) {
  auto with_chain = [](const std::string& chain) {
    return Spec(
        absl::StrCat(R"(task_definitions { name: "t" splits { key: "train" value: "a.tfrecord" } )", chain, " }"), "t");
  };
  const std::string translate = R"(preprocessors { translate { source_language: "en" target_language: "de" } })";
  EXPECT_THAT(Validate(with_chain(translate)), IsOk());
  EXPECT_EQ(TfRecordFeatures(with_chain(translate).task_definitions(0)), (std::vector<std::string>{"de", "en"}));
  const std::string summarize = R"(preprocessors { summarize { article_key: "article" summary_key: "highlights" } })";
  EXPECT_THAT(Validate(with_chain(summarize)), IsOk());
  EXPECT_EQ(TfRecordFeatures(with_chain(summarize).task_definitions(0)),
            (std::vector<std::string>{"article", "highlights"}));
  EXPECT_THAT(
      Validate(with_chain(R"(preprocessors { translate { source_language: "xx" target_language: "de" } })")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("task_definitions[0].preprocessors[0].translate.source_language: \"xx\" is not a language "
                         "code Trainyard names")));
  EXPECT_THAT(Validate(with_chain(R"(preprocessors { summarize { article_key: "article" } })")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("task_definitions[0].preprocessors[0].summarize.summary_key: empty")));
  // After a rekey, translate sees the rekeyed features only.
  EXPECT_THAT(Validate(with_chain(R"(preprocessors { rekey { key_map { key: "en" value: "inputs" } } } )" + translate)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("preprocessors[1].translate.target_language: \"de\" is not a feature of the "
                                 "examples here; they have: en")));
  EXPECT_THAT(Validate(with_chain(R"(preprocessors { prefix_lm {} } )" + translate)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("preprocessors[1].translate: works on text features, so it comes before")));
}

TEST(TaskValidationTest, LanguageNamesAreT5s) {
  EXPECT_EQ(*T5LanguageName("en"), "English");
  EXPECT_EQ(*T5LanguageName("de"), "German");
  EXPECT_EQ(*T5LanguageName("ro"), "Romanian");
  EXPECT_EQ(*T5LanguageName("zh-cn"), "Chinese");  // T5 takes the first two letters
  EXPECT_THAT(T5LanguageName("x").status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("en, es")));
}

TEST(TaskValidationTest, TfRecordSplitsHaveTheFeaturesTheirRekeyTakes) {
  EXPECT_TRUE(IsTfRecordPath("data/train.tfrecord"));
  EXPECT_TRUE(IsTfRecordPath("train.tfrecord.gz"));
  EXPECT_TRUE(IsTfRecordPath("/d/c4-train.tfrecord-00000-of-01024"));
  EXPECT_TRUE(IsTfRecordPath("/d/train.tfrecord-*-of-*"));
  EXPECT_FALSE(IsTfRecordPath("train.tfrecords.jsonl"));
  EXPECT_FALSE(IsTfRecordPath("/d.tfrecord/train.tsv"));
  auto with_chain = [](const std::string& splits, const std::string& chain) {
    return Spec(absl::StrCat("task_definitions { name: \"t\" ", splits, " ", chain, " }"), "t");
  };
  const std::string tfrecord = R"(splits { key: "train" value: "a.tfrecord-*-of-*" })";
  const std::string rekey =
      R"(preprocessors { rekey { key_map { key: "inputs" value: "question" } key_map { key: "targets" value: )"
      R"("answer" } } })";
  EXPECT_THAT(Validate(with_chain(tfrecord, "")), IsOk());
  EXPECT_THAT(Validate(with_chain(tfrecord, rekey)), IsOk());
  EXPECT_EQ(TfRecordFeatures(with_chain(tfrecord, rekey).task_definitions(0)),
            (std::vector<std::string>{"answer", "question"}));
  EXPECT_EQ(TfRecordFeatures(with_chain(tfrecord, "").task_definitions(0)),
            (std::vector<std::string>{"inputs", "targets"}));
  EXPECT_THAT(Validate(with_chain(R"(splits { key: "train" value: "a.tfrecord" } splits { key: "validation" )"
                                  R"(value: "b.jsonl" })",
                                  "")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("task_definitions[0].splits: mixes TFRecord or TFDS with other files")));
}

TEST(TaskValidationTest, TfdsSplitsAndSeqioCaches) {
  auto tfds = ParseTfdsSplit("tfds:c4/en:3.0.1:train[:95%]");
  ASSERT_THAT(tfds.status(), IsOk());
  EXPECT_EQ(tfds->name, "c4");
  EXPECT_EQ(tfds->config, "en");
  EXPECT_EQ(tfds->version, "3.0.1");
  EXPECT_EQ(tfds->split, "train");
  EXPECT_TRUE(tfds->percent);
  EXPECT_FALSE(tfds->has_from);
  EXPECT_TRUE(tfds->has_to);
  EXPECT_EQ(tfds->to, 95);
  auto plain = ParseTfdsSplit("tfds:mnist:test");
  ASSERT_THAT(plain.status(), IsOk());
  EXPECT_EQ(plain->config, "");
  EXPECT_EQ(plain->version, "");
  EXPECT_FALSE(plain->has_from || plain->has_to);
  auto range = ParseTfdsSplit("tfds:squad:validation[-100:200]");
  ASSERT_THAT(range.status(), IsOk());
  EXPECT_EQ(range->from, -100);
  EXPECT_EQ(range->to, 200);
  EXPECT_FALSE(range->percent);
  for (const char* bad : {"tfds:c4", "tfds:c4/en/x:train", "tfds:c4:train[:95%", "tfds:c4:train[10%:20]",
                          "tfds:c4:train[:150%]", "tfds:c4:train[a:b]", "tfds::train", "tfds:../x:train"}) {
    EXPECT_THAT(ParseTfdsSplit(bad).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_EQ(SplitFormatOf("seqio_cache:/cache/my_task"), SplitFormat::kSeqioCache);
  EXPECT_EQ(SplitFormatOf("tfds:c4/en:train"), SplitFormat::kTfds);
  EXPECT_EQ(SplitFormatOf("a.tfrecord.gz"), SplitFormat::kTfRecord);
  EXPECT_EQ(SplitFormatOf("a.jsonl"), SplitFormat::kJsonl);
  EXPECT_EQ(SplitFormatOf("a.txt"), SplitFormat::kText);
  EXPECT_EQ(SplitFormatOf("a.tsv"), SplitFormat::kTsv);
  auto with_splits = [](const std::string& splits) {
    return Spec(absl::StrCat("task_definitions { name: \"t\" ", splits, " }"), "t");
  };
  EXPECT_THAT(Validate(with_splits(R"(splits { key: "train" value: "tfds:c4/en:3.0.1:train[:95%]" } )"
                                   R"(splits { key: "validation" value: "tfds:c4/en:3.0.1:train[95%:]" })")),
              IsOk());
  EXPECT_THAT(Validate(with_splits(R"(splits { key: "train" value: "seqio_cache:/cache/t" })")), IsOk());
  EXPECT_THAT(Validate(with_splits(R"(splits { key: "train" value: "t.tfrecord" } tfds_data_dir: "/data")")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("task_definitions[0].tfds_data_dir: set, but no split is a TFDS split")));
  EXPECT_THAT(Validate(with_splits(R"(splits { key: "train" value: "tfds:c4:train[:95" })")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("task_definitions[0].splits[train]: the slice does not end with ]")));
  EXPECT_THAT(
      Validate(with_splits(R"(splits { key: "train" value: "seqio_cache:/cache/t" } )"
                           R"(splits { key: "validation" value: "v.tfrecord" })")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("splits: mixes TFRecord or TFDS with seqio caches")));
}

TEST(TaskValidationTest, TheMixtureFragmentValidatesAndIsEvaluatedPerTask) {
  JobSpec spec = Spec(absl::StrCat(kMixtureTasks, R"pb(
                        mixture_definitions {
                          name: "mix"
                          tasks { name: "digits_to_words" rate: 1.0 }
                          tasks { name: "my_qa" rate: 3.0 }
                        }
                      )pb"),
                      "mix");
  spec.mutable_feature_lengths()->set_inputs(32);
  spec.mutable_feature_lengths()->set_targets(32);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  EXPECT_THAT(spec.eval().tasks(), ElementsAre("digits_to_words", "my_qa"));
  EXPECT_EQ(spec.task(), "mix");
  absl::StatusOr<std::vector<std::pair<std::string, double>>> leaves = LeafTasks(spec, "mix");
  ASSERT_THAT(leaves, IsOk());
  EXPECT_THAT(*leaves, ElementsAre(Pair("digits_to_words", 0.25), Pair("my_qa", 0.75)));
}

TEST(TaskValidationTest, NestedMixturesShareTheirRate) {
  JobSpec spec = Spec(absl::StrCat(kMixtureTasks, R"pb(
                        mixture_definitions {
                          name: "inner"
                          tasks { name: "digits_to_words" rate: 1.0 }
                          tasks { name: "my_qa" rate: 1.0 }
                        }
                        mixture_definitions {
                          name: "outer"
                          tasks { name: "inner" rate: 2.0 }
                          tasks { name: "my_qa" rate: 2.0 }
                        }
                      )pb"),
                      "outer");
  absl::StatusOr<std::vector<std::pair<std::string, double>>> leaves = LeafTasks(spec, "outer");
  ASSERT_THAT(leaves, IsOk());
  // inner gets 1/2, split evenly; my_qa 1/4 through inner + 1/2 directly.
  EXPECT_THAT(*leaves, ElementsAre(Pair("digits_to_words", 0.25), Pair("my_qa", 0.75)));
}

TEST(TaskValidationTest, BadMixturesAreRefusedNamingTheField) {
  auto mixture = [](const std::string& body) { return Spec(absl::StrCat(kMixtureTasks, body), "mix"); };
  EXPECT_THAT(
      Validate(mixture(R"pb(mixture_definitions {
                              name: "mix"
                              tasks { name: "nope" rate: 1 }
                            })pb")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("mixture_definitions[0].tasks[0].name: \"nope\" is not a known task or mixture; known: "
                         "digits_to_words, my_qa, mix")));
  EXPECT_THAT(
      Validate(mixture(R"pb(mixture_definitions {
                              name: "mix"
                              tasks { name: "my_qa" rate: 0 }
                            })pb")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("mixture_definitions[0].tasks[0].rate: 0 is not allowed; a rate is a finite number > 0")));
  EXPECT_THAT(
      Validate(mixture(R"pb(mixture_definitions {
                              name: "mix"
                              tasks { name: "my_qa" rate: -2 }
                            })pb")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mixture_definitions[0].tasks[0].rate: -2 is not")));
  EXPECT_THAT(Validate(mixture(R"pb(
                mixture_definitions {
                  name: "mix"
                  tasks { name: "other" rate: 1 }
                }
                mixture_definitions {
                  name: "other"
                  tasks { name: "mix" rate: 1 }
                  tasks { name: "my_qa" rate: 1 }
                }
              )pb")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mixture_definitions[0].tasks: mixtures form a cycle: mix -> other -> mix")));
  EXPECT_THAT(Validate(mixture(R"pb(mixture_definitions {
                                      name: "mix"
                                      tasks { name: "mix" rate: 1 }
                                    })pb")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mixtures form a cycle: mix -> mix")));
  EXPECT_THAT(Validate(mixture(R"pb(mixture_definitions {
                                      name: "mix"
                                      tasks { name: "my_qa" rate: 1 }
                                      tasks { name: "my_qa" rate: 2 }
                                    })pb")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mixture_definitions[0].tasks[1].name: \"my_qa\" is listed twice")));
  EXPECT_THAT(Validate(mixture(R"pb(mixture_definitions {
                                      name: "my_qa"
                                      tasks { name: "digits_to_words" rate: 1 }
                                    })pb")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mixture_definitions[0].name: \"my_qa\" is already a task")));
  EXPECT_THAT(Validate(Spec(absl::StrCat(kSpanTask, R"pb(
                              mixture_definitions {
                                name: "mix"
                                tasks { name: "digits_to_words" rate: 1 }
                                tasks { name: "my_corpus_span" rate: 1 }
                              }
                            )pb"),
                            "mix")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mixture_definitions[0].tasks: digits_to_words uses the bundled vocabulary with 0 "
                                 "extra ids, my_corpus_span uses corpus/spm.model with 100 extra ids; a mixture's "
                                 "tasks share one vocabulary")));
}

}  // namespace
}  // namespace trainyard
