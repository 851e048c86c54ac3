#include "spec/jobspec_validator.h"
#include "spec/session_request.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "spec/jobspec.h"

namespace trainyard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

JobSpec Minimal() {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"pb(
                                                name: "demo"
                                                model { preset: "tiny" }
                                                task: "digits_to_words"
                                                feature_lengths { inputs: 32 targets: 16 }
                                                batch_size: 16
                                                total_steps: 1000
                                                output_dir: "/tmp/trainyard/demo"
                                              )pb",
                                              "minimal");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

absl::Status Validate(JobSpec spec, const ValidationOptions& options = {}) {
  return ValidateAndNormalize(&spec, options);
}

TEST(ValidatorTest, MinimalSpecGetsEveryDefault) {
  JobSpec spec = Minimal();
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  EXPECT_EQ(spec.kind(), TRAIN);
  EXPECT_EQ(spec.num_workers(), 1);
  EXPECT_EQ(spec.num_microbatches(), 1);
  EXPECT_EQ(spec.summary_period(), 100);
  EXPECT_TRUE(spec.has_seed());
  EXPECT_EQ(spec.seed(), 0);
  EXPECT_EQ(spec.max_restarts(), 3);
  EXPECT_EQ(spec.dtype(), FLOAT32);
  ASSERT_TRUE(spec.optimizer().has_adafactor());
  EXPECT_FLOAT_EQ(spec.optimizer().adafactor().decay_rate(), 0.8f);
  EXPECT_FLOAT_EQ(spec.optimizer().adafactor().clipping_threshold(), 1.0f);
  EXPECT_FLOAT_EQ(spec.optimizer().adafactor().epsilon1(), 1e-30f);
  EXPECT_FLOAT_EQ(spec.optimizer().adafactor().epsilon2(), 1e-3f);
  EXPECT_TRUE(spec.optimizer().adafactor().multiply_by_parameter_scale());
  EXPECT_EQ(spec.optimizer().adafactor().min_dim_size_to_factor(), 128);
  EXPECT_EQ(spec.learning_rate().factors(), "constant * rsqrt_decay");
  EXPECT_EQ(spec.learning_rate().warmup_steps(), 10000);
  EXPECT_EQ(spec.restore().mode(), RestoreConfig::LATEST);
  EXPECT_TRUE(spec.restore().strict());
  EXPECT_FLOAT_EQ(spec.loss().z_loss(), 1e-4f);
  EXPECT_EQ(spec.loss().normalization(), LossConfig::NUM_TARGET_TOKENS);
  EXPECT_EQ(spec.data().train_split(), "train");
  EXPECT_TRUE(spec.data().pack());
  ASSERT_EQ(spec.eval().tasks_size(), 1);
  EXPECT_EQ(spec.eval().tasks(0), "digits_to_words");
  EXPECT_EQ(spec.inference().method(), InferenceConfig::GREEDY);
  EXPECT_EQ(spec.inference().max_decode_length(), 16);
  EXPECT_TRUE(spec.checkpoint().async());
  EXPECT_TRUE(spec.data_parallel().overlap_allreduce());
  EXPECT_EQ(spec.data_parallel().bucket_mb(), 4);
}

TEST(ValidatorTest, BucketSizeIsBounded) {
  JobSpec spec = Minimal();
  spec.mutable_data_parallel()->set_bucket_mb(2048);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data_parallel.bucket_mb")));
  spec.mutable_data_parallel()->set_bucket_mb(-1);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data_parallel.bucket_mb")));
  spec.mutable_data_parallel()->set_bucket_mb(1024);
  spec.mutable_data_parallel()->set_overlap_allreduce(false);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  EXPECT_FALSE(spec.data_parallel().overlap_allreduce());
}

TEST(ValidatorTest, ShardGroupsDivideTheWorkersAndNeedSharding) {
  JobSpec spec = Minimal();
  spec.set_num_workers(4);
  spec.set_batch_size(8);
  spec.mutable_data_parallel()->set_shard_group_size(2);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("data_parallel.shard_group_size: 2 with sharding NONE")));
  spec.mutable_data_parallel()->set_sharding(DataParallelConfig::PARAMETERS);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  EXPECT_EQ(spec.data_parallel().shard_group_size(), 2);
  for (int bad : {1, 3, -2}) {
    spec.mutable_data_parallel()->set_shard_group_size(bad);
    EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr(absl::StrCat("data_parallel.shard_group_size: ", bad,
                                                                " does not divide num_workers 4 into groups of 2"))))
        << bad;
  }
  spec.mutable_data_parallel()->set_shard_group_size(4);  // one group: plain sharding
  EXPECT_THAT(Validate(spec), IsOk());
}

TEST(ValidatorTest, ReproducibleTrainingRefusesWhatItCannotMakeExact) {
  JobSpec spec = Minimal();
  spec.set_num_workers(2);
  spec.set_batch_size(8);
  spec.mutable_data_parallel()->set_reproducible(true);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  EXPECT_TRUE(IsReproducibleTraining(spec));
  EXPECT_TRUE(ReadsGlobalBatches(spec));
  // Every sharding: OPTIMIZER sums whole gradients on every rank,
  // GRADIENTS and PARAMETERS reduce-scatter the integers.
  for (auto sharding : {DataParallelConfig::OPTIMIZER, DataParallelConfig::GRADIENTS, DataParallelConfig::PARAMETERS}) {
    spec.mutable_data_parallel()->set_sharding(sharding);
    EXPECT_THAT(Validate(spec), IsOk()) << DataParallelConfig::Sharding_Name(sharding);
  }
  spec.mutable_data_parallel()->set_sharding(DataParallelConfig::NONE);
  spec.clear_data_parallel();
  spec.mutable_data_parallel()->set_reproducible(true);
  // ELASTIC: regroups carry the exact sum's scales (RegroupState).
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
  EXPECT_THAT(Validate(spec), IsOk());
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::RESTART);
  spec.set_kind(INFERENCE);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("data_parallel.reproducible: true for a job of kind INFERENCE, which "
                                                 "does not train")));
}

TEST(ValidatorTest, ElasticShardingNeedsTwoOrMoreShardGroups) {
  JobSpec spec = Minimal();
  spec.set_num_workers(4);
  spec.set_batch_size(8);
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
  spec.mutable_data_parallel()->set_sharding(DataParallelConfig::PARAMETERS);
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("fault_tolerance.mode: ELASTIC with data_parallel.sharding PARAMETERS over every "
                                 "worker: a lost rank's shard of the state would exist on no other rank")));
  spec.mutable_data_parallel()->set_shard_group_size(4);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("ELASTIC with data_parallel.sharding PARAMETERS over 4 workers")));
  spec.mutable_data_parallel()->set_shard_group_size(2);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  EXPECT_EQ(spec.fault_tolerance().min_workers(), 2);  // one whole group
  spec.mutable_fault_tolerance()->set_min_workers(3);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("fault_tolerance.min_workers: 3 is not a multiple of "
                                                 "data_parallel.shard_group_size 2")));
}

TEST(ValidatorTest, OverlapAllgatherOnlyWithSharding) {
  JobSpec none = Minimal();
  ASSERT_THAT(ValidateAndNormalize(&none), IsOk());
  EXPECT_FALSE(none.data_parallel().has_overlap_allgather());
  none.mutable_data_parallel()->set_overlap_allgather(false);
  EXPECT_THAT(Validate(none), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("data_parallel.overlap_allgather: set with sharding NONE")));
  for (auto mode : {DataParallelConfig::OPTIMIZER, DataParallelConfig::GRADIENTS}) {
    JobSpec sharded = Minimal();
    sharded.mutable_data_parallel()->set_sharding(mode);
    ASSERT_THAT(ValidateAndNormalize(&sharded), IsOk());
    EXPECT_TRUE(sharded.data_parallel().overlap_allgather());
    sharded.mutable_data_parallel()->set_overlap_allgather(false);
    ASSERT_THAT(ValidateAndNormalize(&sharded), IsOk());
    EXPECT_FALSE(sharded.data_parallel().overlap_allgather());
  }
}

TEST(ValidatorTest, NormalizationIsIdempotent) {
  JobSpec once = Minimal();
  once.add_actions()->mutable_early_stopping()->set_metric("loss");
  once.mutable_actions(0)->mutable_early_stopping()->set_task("digits_to_words");
  once.mutable_actions(0)->mutable_early_stopping()->set_mode(EarlyStopping::MIN);
  once.set_eval_period(100);
  once.mutable_learning_rate()->set_factors("constant*linear_warmup*cosine_decay");
  ASSERT_THAT(ValidateAndNormalize(&once), IsOk());
  EXPECT_EQ(once.learning_rate().factors(), "constant * linear_warmup * cosine_decay");
  EXPECT_EQ(once.learning_rate().steps_per_cycle(), 1000);
  JobSpec twice = once;
  ASSERT_THAT(ValidateAndNormalize(&twice), IsOk());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(once, twice));
}

TEST(ValidatorTest, SummaryPeriodDefaultsToTotalStepsWhenShorter) {
  JobSpec spec = Minimal();
  spec.set_total_steps(40);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  EXPECT_EQ(spec.summary_period(), 40);
}

TEST(ValidatorTest, BatchMustDivideByWorkersTimesMicrobatches) {
  JobSpec spec = Minimal();
  spec.set_batch_size(30);
  spec.set_num_workers(4);
  spec.set_num_microbatches(2);
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size: 30 is not divisible by num_workers x "
                                                                     "num_microbatches = 4 x 2 = 8")));
  spec.set_batch_size(32);
  EXPECT_THAT(Validate(spec), IsOk());
}

TEST(ValidatorTest, ReportsEveryProblemAtOnce) {
  JobSpec spec = Minimal();
  spec.clear_name();
  spec.set_total_steps(0);
  spec.mutable_model()->set_preset("t5_giant");
  absl::Status status = Validate(spec);
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("name: missing"), HasSubstr("total_steps: 0 is out of range; allowed: 1.."),
                             HasSubstr("model.preset: \"t5_giant\" is not a preset; "
                                       "allowed: tiny, t5_small"))));
}

TEST(ValidatorTest, TaskDefinitionsAreChecked) {
  JobSpec spec = Minimal();
  absl::StatusOr<JobSpec> with_defs = ParseJobSpec(R"pb(
                                                     task_definitions {
                                                       name: "mine"
                                                       splits { key: "train" value: "/data/mine.jsonl" }
                                                       metric_fns: "bleu"
                                                     }
                                                   )pb",
                                                   "defs");
  ASSERT_THAT(with_defs.status(), IsOk());
  spec.MergeFrom(*with_defs);
  ASSERT_THAT(Validate(spec), IsOk());
  TaskDefinition* twice = spec.add_task_definitions();
  *twice = spec.task_definitions(0);
  twice->add_metric_fns("accuracy");
  spec.add_task_definitions()->set_name("no splits");
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("task_definitions[1].name: \"mine\" is defined twice"),
                             HasSubstr("task_definitions[1].metric_fns[1]: \"accuracy\" is not one of: bleu"),
                             HasSubstr("task_definitions[2].name: \"no splits\" is not a task name"),
                             HasSubstr("task_definitions[2].splits: missing"))));
}

TEST(ValidatorTest, UnknownLearningRateFactor) {
  JobSpec spec = Minimal();
  spec.mutable_learning_rate()->set_factors("constant * exponential_decay");
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("learning_rate.factors: unknown factor "
                                                                           "\"exponential_decay\""),
                                                                 HasSubstr("rsqrt_normalized_decay"))));
}

TEST(ValidatorTest, OutputRootConfinesOutputDir) {
  ValidationOptions options;
  options.output_root = "/srv/trainyard";
  JobSpec spec = Minimal();
  spec.set_output_dir("runs/demo");
  ASSERT_THAT(ValidateAndNormalize(&spec, options), IsOk());
  EXPECT_EQ(spec.output_dir(), "/srv/trainyard/runs/demo");

  spec.set_output_dir("/srv/trainyard-other/demo");  // a prefix, not a parent
  EXPECT_THAT(Validate(spec, options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("output_dir: \"/srv/trainyard-other/demo\" is outside the "
                                                          "allowed output root \"/srv/trainyard\"")));
  spec.set_output_dir("runs/../../etc");
  EXPECT_THAT(Validate(spec, options), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("contains \"..\"")));
}

TEST(ValidatorTest, ASymbolicLinkOutOfTheRootIsRefused) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  std::filesystem::create_directories(tmp + "/root/inside");
  std::filesystem::create_directories(tmp + "/elsewhere");
  std::error_code ec;
  std::filesystem::create_directory_symlink(tmp + "/elsewhere", tmp + "/root/escape", ec);
  std::filesystem::create_directory_symlink(tmp + "/root/inside", tmp + "/root/alias", ec);
  ValidationOptions options;
  options.output_root = tmp + "/root";
  JobSpec spec = Minimal();
  spec.set_output_dir("escape/run");
  EXPECT_THAT(Validate(spec, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dir: \"escape/run\" leads through a symbolic link to \"" + tmp +
                                 "/elsewhere/run\", outside the allowed output root")));
  spec.set_output_dir("alias/run");  // a link that stays inside is fine
  EXPECT_THAT(Validate(spec, options), IsOk());
  spec.set_output_dir("new/deeper/run");  // not there yet: checked lexically
  EXPECT_THAT(Validate(spec, options), IsOk());
}

TEST(ValidatorTest, ExplicitConfigIsCheckedFieldByField) {
  JobSpec spec = Minimal();
  ModelConfig* c = spec.mutable_model()->mutable_config();
  c->set_vocab_size(1000);
  c->set_d_model(64);
  c->set_num_heads(0);
  c->set_d_kv(16);
  c->set_d_ff(128);
  c->set_num_encoder_layers(2);
  c->set_num_decoder_layers(2);
  c->set_dropout_rate(1.5f);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       AllOf(HasSubstr("model.config.num_heads: 0 is out of range; allowed: 1..1024"),
                                             HasSubstr("model.config.dropout_rate: 1.5 is out of range; "
                                                       "allowed: [0, 1)"))));
}

TEST(ValidatorTest, PresetVocabSizeOverrideIsRangeCheckedAndRefusedWithAConfig) {
  JobSpec spec = Minimal();
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_model()->set_vocab_size(640);
  EXPECT_THAT(Validate(spec), IsOk());
  spec.mutable_model()->set_vocab_size(1);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("model.vocab_size: 1 is out of range; allowed: 2..4194304")));
  ModelConfig* c = spec.mutable_model()->mutable_config();
  c->set_vocab_size(1000);
  c->set_d_model(64);
  c->set_num_heads(4);
  c->set_d_kv(16);
  c->set_d_ff(128);
  c->set_num_encoder_layers(2);
  c->set_num_decoder_layers(2);
  spec.mutable_model()->set_vocab_size(640);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("model.vocab_size: only applies to a preset; with an explicit "
                                                 "config set model.config.vocab_size")));
}

TEST(ValidatorTest, FinetuningNeedsACheckpoint) {
  JobSpec spec = Minimal();
  spec.set_kind(FINETUNING);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("restore.path: a FINETUNING")));
  spec.mutable_restore()->set_path("/ckpt/t5_small/checkpoint_1000000");
  EXPECT_THAT(Validate(spec), IsOk());
}

TEST(ValidatorTest, EvaluationNeedsNoStepsButACheckpoint) {
  JobSpec spec = Minimal();
  spec.set_kind(EVALUATION);
  spec.set_total_steps(0);
  EXPECT_THAT(Validate(spec), IsOk());
  spec.mutable_restore()->set_mode(RestoreConfig::NONE);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("restore.mode: NONE")));
}

TEST(ValidatorTest, RestoreAllIsForEvaluationAndInferenceJobsOnly) {
  JobSpec spec = Minimal();
  spec.mutable_restore()->set_mode(RestoreConfig::ALL);
  for (JobKind kind : {TRAIN, FINETUNING, PRETRAINING}) {
    spec.set_kind(kind);
    spec.mutable_restore()->set_path(kind == FINETUNING ? "/tmp/trainyard/pretrained" : "");
    EXPECT_THAT(Validate(spec),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::Eq(absl::StrCat("restore.mode: ALL is not allowed for a ", JobKind_Name(kind),
                                                    " job; allowed for EVALUATION and INFERENCE jobs, which evaluate "
                                                    "every checkpoint in turn (a training job restores one: LATEST, "
                                                    "SPECIFIC or NONE)"))));
  }
  spec.mutable_restore()->clear_path();
  spec.set_total_steps(0);
  for (JobKind kind : {EVALUATION, INFERENCE}) {
    spec.set_kind(kind);
    spec.mutable_restore()->set_wait_seconds(30);
    JobSpec normalized = spec;
    EXPECT_THAT(ValidateAndNormalize(&normalized, {}), IsOk());
    EXPECT_EQ(normalized.restore().mode(), RestoreConfig::ALL);
    EXPECT_EQ(normalized.restore().wait_seconds(), 30);
  }
}

TEST(ValidatorTest, RestoreWaitSecondsNeedsModeAllAndAtMostAWeek) {
  JobSpec spec = Minimal();
  spec.set_kind(EVALUATION);
  spec.set_total_steps(0);
  spec.mutable_restore()->set_wait_seconds(10);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       ::testing::Eq("restore.wait_seconds: only applies with restore.mode: ALL")));
  spec.mutable_restore()->set_mode(RestoreConfig::ALL);
  spec.mutable_restore()->set_wait_seconds(-1);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       ::testing::Eq("restore.wait_seconds: -1 is out of range; allowed: 0..604800")));
  spec.mutable_restore()->set_wait_seconds(604801);
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::Eq("restore.wait_seconds: 604801 is out of range; allowed: 0..604800")));
  spec.mutable_restore()->set_wait_seconds(604800);
  EXPECT_THAT(Validate(spec), IsOk());
  spec.mutable_restore()->set_fallback_to_scratch(true);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       ::testing::Eq("restore.fallback_to_scratch: only applies with restore.mode: "
                                                     "LATEST (ALL evaluates checkpoints)")));
}

TEST(ValidatorTest, AssignmentMapPatternsMustCompile) {
  JobSpec spec = Minimal();
  auto* rename = spec.mutable_restore()->add_assignment_map();
  rename->set_pattern("encoder/(layers_[0-9+");
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("restore.assignment_map[0].pattern")));
  rename->set_pattern("encoder/(.*)");
  rename->set_replacement("enc/\\2");  // only one group
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("restore.assignment_map[0].replacement")));
  rename->set_replacement("enc/\\1");
  EXPECT_THAT(Validate(spec), IsOk());
}

TEST(ValidatorTest, ActionTasksMustBeEvaluated) {
  JobSpec spec = Minimal();
  EarlyStopping* es = spec.add_actions()->mutable_early_stopping();
  es->set_task("digits_to_words");
  es->set_metric("loss");
  es->set_mode(EarlyStopping::MIN);
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("actions[0].on: ACTION_TRAIN_EVAL needs periodic "
                                                                     "evaluation: set eval_period > 0")));
  spec.set_eval_period(100);
  EXPECT_THAT(Validate(spec), IsOk());
  es->set_task("glue");
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("actions[0].early_stopping.task: \"glue\" is not "
                                                                     "an eval task; allowed: digits_to_words")));
  spec.mutable_actions(0)->set_on(ACTION_TRAIN);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only the \"train\" metrics")));
}

TEST(ValidatorTest, InferEvalActionsNeedInferenceMetrics) {
  JobSpec spec = Minimal();
  spec.set_eval_period(100);
  ActionConfig* action = spec.add_actions();
  action->set_on(ACTION_INFER_EVAL);
  EarlyStopping* es = action->mutable_early_stopping();
  es->set_task("digits_to_words");
  es->set_metric("exact_match");
  es->set_mode(EarlyStopping::MAX);
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("actions[0].on: ACTION_INFER_EVAL acts on inference metrics: set "
                                                 "eval.infer_metrics: true")));
  spec.mutable_eval()->set_infer_metrics(true);
  EXPECT_THAT(Validate(spec), IsOk());
}

TEST(SessionRequestTest, DecodingIsCheckedAndDefaultedAsForJobs) {
  OpenSessionRequest open;
  open.set_checkpoint("/ckpt/checkpoint_1");
  absl::StatusOr<OpenSessionRequest> normalized = NormalizeOpenSessionRequest(open, {});
  ASSERT_THAT(normalized, IsOk());
  EXPECT_EQ(normalized->inference().method(), InferenceConfig::GREEDY);
  EXPECT_EQ(normalized->inference().max_decode_length(), 64);  // the targets length
  open.mutable_inference()->set_method(InferenceConfig::BEAM);
  normalized = NormalizeOpenSessionRequest(open, {});
  ASSERT_THAT(normalized, IsOk());
  EXPECT_EQ(normalized->inference().beam_size(), 4);
  EXPECT_FLOAT_EQ(normalized->inference().alpha(), 0.6f);
  open.mutable_inference()->set_seed(3);
  EXPECT_THAT(NormalizeOpenSessionRequest(open, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inference: temperature, top_k, top_p and seed only apply with method: SAMPLE")));
  open.mutable_inference()->set_method(InferenceConfig::SAMPLE);
  open.mutable_inference()->set_top_p(1.5f);
  EXPECT_THAT(NormalizeOpenSessionRequest(open, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inference.top_p: 1.5 is out of range")));
  open.mutable_inference()->set_top_p(0.9f);
  open.mutable_inference()->set_split("train");
  EXPECT_THAT(NormalizeOpenSessionRequest(open, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inference: split and num_batches do not apply: a session decodes the examples it "
                                 "is given")));
}

TEST(ValidatorTest, SamplingOptionsOnlyWithSampling) {
  JobSpec spec = Minimal();
  spec.mutable_inference()->set_top_k(40);
  EXPECT_THAT(Validate(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only apply with method: SAMPLE")));
  spec.mutable_inference()->set_method(InferenceConfig::SAMPLE);
  JobSpec normalized = spec;
  ASSERT_THAT(ValidateAndNormalize(&normalized), IsOk());
  EXPECT_FLOAT_EQ(normalized.inference().temperature(), 1.0f);
}

TEST(ValidatorTest, NonPrintableCharactersAreEscapedInMessages) {
  JobSpec spec = Minimal();
  spec.set_name(std::string("bad\x01name", 8));
  EXPECT_THAT(Validate(spec), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name: \"bad\\x01name\"")));
}

}  // namespace
}  // namespace trainyard
