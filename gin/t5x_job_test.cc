// T5X training configurations in gin (testdata/t5x: T5X's dialect and
// configurable names) converted to JobSpecs: every mapped field, T5X's
// defaults where a configurable leaves an argument unbound, the published
// T5.1.1 parameter counts, and each kind of binding that cannot be
// honoured refused with its file and line.
#include "gin/t5x_job.h"

#include "absl/strings/match.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "spec/jobspec_validator.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr char kRoot[] = "gin/testdata/t5x";

absl::StatusOr<GinConversion> Convert(const std::vector<std::string>& files, std::vector<std::string> bindings,
                                      bool allow_unmapped = false, const std::string& tfds_data_dir = "") {
  GinLoadOptions load;
  load.search_path = {kRoot};
  load.bindings = std::move(bindings);
  std::vector<std::string> paths;
  for (const std::string& f : files) paths.push_back(std::string(kRoot) + "/" + f);
  absl::StatusOr<GinConfig> config = GinConfig::Load(paths, load);
  if (!config.ok()) return config.status();
  GinConversionOptions options;
  options.allow_unmapped = allow_unmapped;
  options.tfds_data_dir = tfds_data_dir;
  return JobSpecFromGin(&*config, options);
}

// What every pretraining run must bind, plus what Trainyard needs bound
// differently from T5X's run file (a local vocabulary, the task's files
// rather than a seqio cache, unpacked evaluation).
std::vector<std::string> PretrainBindings() {
  return {"MODEL_DIR = '/tmp/t5x_run'",
          "TRAIN_STEPS = 20000",
          "MIXTURE_OR_TASK_NAME = 'digits_to_words'",
          "TASK_FEATURE_LENGTHS = {'inputs': 512, 'targets': 114}",
          "DROPOUT_RATE = 0.0",
          "seqio.SentencePieceVocabulary.sentencepiece_model_file = '/data/spm.model'",
          "USE_CACHED_TASKS = False",
          "train_eval/utils.DatasetConfig.pack = False"};
}

TEST(T5xJobTest, APretrainingRunOfT511SmallConvertsFieldByField) {
  absl::StatusOr<GinConversion> c = Convert({"models/t5_1_1_small.gin", "runs/pretrain.gin"}, PretrainBindings());
  ASSERT_THAT(c.status(), IsOk());
  const JobSpec& s = c->spec;
  EXPECT_EQ(s.kind(), TRAIN);
  EXPECT_EQ(s.output_dir(), "/tmp/t5x_run");
  EXPECT_EQ(s.name(), "t5x_run");
  EXPECT_EQ(s.total_steps(), 20000);
  EXPECT_EQ(s.eval_period(), 1000);
  EXPECT_EQ(s.summary_period(), 1000);  // T5X's stats_period defaults to eval_period
  EXPECT_EQ(s.seed(), 0);
  EXPECT_EQ(s.task(), "digits_to_words");
  EXPECT_EQ(s.feature_lengths().inputs(), 512);
  EXPECT_EQ(s.feature_lengths().targets(), 114);
  EXPECT_EQ(s.batch_size(), 128);
  EXPECT_EQ(s.num_microbatches(), 1);
  EXPECT_TRUE(s.data().pack());
  EXPECT_TRUE(s.data().shuffle());
  EXPECT_EQ(s.data().train_split(), "train");
  ASSERT_EQ(s.eval().tasks_size(), 1);
  EXPECT_EQ(s.eval().tasks(0), "digits_to_words");
  EXPECT_EQ(s.eval().split(), "validation");
  EXPECT_EQ(s.eval().num_batches(), 20);
  EXPECT_EQ(s.checkpoint_period(), 1000);
  EXPECT_EQ(s.keep_checkpoints(), 0);
  EXPECT_EQ(s.checkpoint().save_dtype(), FLOAT32);
  EXPECT_EQ(s.dtype(), BFLOAT16);
  EXPECT_EQ(c->vocabulary, "/data/spm.model");
  // The loss: z_loss 1e-4, the summed loss as T5X's None normalises.
  EXPECT_FLOAT_EQ(s.loss().z_loss(), 1e-4f);
  EXPECT_EQ(s.loss().normalization(), LossConfig::NO_NORMALIZATION);
  // Adafactor: the bound decay rate, T5X's defaults for the rest.
  ASSERT_TRUE(s.optimizer().has_adafactor());
  EXPECT_FLOAT_EQ(s.optimizer().adafactor().decay_rate(), 0.8f);
  EXPECT_FLOAT_EQ(s.optimizer().adafactor().clipping_threshold(), 1.0f);
  EXPECT_EQ(s.optimizer().adafactor().min_dim_size_to_factor(), 128);
  // The schedule: the run file's factors; T5X's function defaults elsewhere.
  EXPECT_EQ(s.learning_rate().factors(), "constant * rsqrt_decay");
  EXPECT_FLOAT_EQ(s.learning_rate().base_learning_rate(), 1.0f);
  EXPECT_EQ(s.learning_rate().warmup_steps(), 10000);
  EXPECT_EQ(s.learning_rate().steps_per_decay(), 20000);
  EXPECT_FLOAT_EQ(s.learning_rate().min_learning_rate(), 1e-8f);
  // Decoding: EncoderDecoderModel's default beam search.
  EXPECT_EQ(s.inference().method(), InferenceConfig::BEAM);
  EXPECT_FLOAT_EQ(s.inference().alpha(), 0.6f);

  // The model is T5.1.1 small: the preset's config and its published count.
  const ModelConfig& m = s.model().config();
  absl::StatusOr<ModelConfig> preset = PresetConfig("t5_1_1_small");
  ASSERT_THAT(preset.status(), IsOk());
  ModelConfig converted = m;
  FillModelConfigDefaults(&converted);
  converted.set_dropout_rate(preset->dropout_rate());
  EXPECT_EQ(converted.SerializeAsString(), preset->SerializeAsString()) << converted.DebugString();
  EXPECT_EQ(CountParameters(converted), 76961152);

  JobSpec validated = s;
  EXPECT_THAT(ValidateAndNormalize(&validated), IsOk());
}

TEST(T5xJobTest, T511BaseHasThePublishedParameterCount) {
  absl::StatusOr<GinConversion> c = Convert({"models/t5_1_1_base.gin", "runs/pretrain.gin"}, PretrainBindings());
  ASSERT_THAT(c.status(), IsOk());
  ModelConfig m = c->spec.model().config();
  FillModelConfigDefaults(&m);
  EXPECT_EQ(CountParameters(m), 247577856);
}

TEST(T5xJobTest, AFinetuningRunRestoresItsCheckpoint) {
  std::vector<std::string> bindings;
  for (const std::string& b : PretrainBindings()) {
    if (b.rfind("DROPOUT_RATE", 0) != 0) bindings.push_back(b);  // the run file's 0.1
  }
  bindings.push_back("INITIAL_CHECKPOINT_PATH = '/ckpt/checkpoint_1000000'");
  bindings.push_back("utils.RestoreCheckpointConfig.assignment_map = [('(.*)/old/(.*)', r'\\1/new/\\2'), ('x', None)]");
  absl::StatusOr<GinConversion> c = Convert({"models/t5_1_1_small.gin", "runs/finetune.gin"}, bindings);
  ASSERT_THAT(c.status(), IsOk());
  const JobSpec& s = c->spec;
  EXPECT_EQ(s.kind(), FINETUNING);
  EXPECT_EQ(s.restore().mode(), RestoreConfig::SPECIFIC);
  EXPECT_EQ(s.restore().path(), "/ckpt/checkpoint_1000000");
  ASSERT_EQ(s.restore().assignment_map_size(), 2);
  EXPECT_EQ(s.restore().assignment_map(0).replacement(), "\\1/new/\\2");
  EXPECT_EQ(s.restore().assignment_map(1).replacement(), "");
  EXPECT_EQ(s.batch_size(), 8);
  EXPECT_EQ(s.checkpoint_period(), 5000);
  EXPECT_EQ(s.learning_rate().factors(), "constant");
  EXPECT_FLOAT_EQ(s.learning_rate().base_learning_rate(), 0.001f);
  EXPECT_FLOAT_EQ(s.model().config().dropout_rate(), 0.1f);
  JobSpec validated = s;
  EXPECT_THAT(ValidateAndNormalize(&validated), IsOk());
}

TEST(T5xJobTest, BindingsThatCannotBeHonouredNameTheirFileAndLine) {
  struct Bad {
    std::string binding;
    std::string message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"partitioning.PjitPartitioner.num_partitions = 2",
            "--gin-binding #9:1: partitioning.PjitPartitioner.num_partitions = 2: Trainyard partitions data only"},
           {"USE_CACHED_TASKS = True",
            "runs/pretrain.gin:48: train/utils.DatasetConfig.use_cached = True: Trainyard "
            "preprocesses the task's own files"},
           {"trainer.Trainer.weight_metrics_computer = @trainer.Other()",
            "trainer.Trainer.weight_metrics_computer = @trainer.Other(): Trainyard converts "
            "trainer.WeightMetricsComputer here"},
           {"adafactor.Adafactor.no_such_arg = 3",
            "--gin-binding #9:1: adafactor.Adafactor.no_such_arg = 3: Trainyard has no counterpart"},
           {"network.T5Config.mlp_activations = ('swish',)", "Trainyard's feed-forward layers are"},
           {"MODEL_DIR = 'gs://bucket/run'",
            "pretrain.gin:22: train_script.train.model_dir = 'gs://bucket/run': Trainyard reads "
            "local files only"},
           {"train.relative_steps = 100", "Trainyard's total_steps counts from step 0"},
           {"train_eval/utils.DatasetConfig.batch_size = 64",
            "Trainyard evaluates in batches of the job's batch_size (128)"},
           {"network.T5Config.emb_dim = 'wide'",
            "--gin-binding #9:1: network.T5Config.emb_dim = 'wide': expected an integer"},
       }) {
    std::vector<std::string> bindings = PretrainBindings();
    bindings.push_back(bad.binding);
    absl::StatusOr<GinConversion> c = Convert({"models/t5_1_1_small.gin", "runs/pretrain.gin"}, bindings);
    EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad.message))) << bad.binding;
  }
}

TEST(T5xJobTest, AllowUnmappedListsWhatItLeftOutAndNotesWhatT5xIgnores) {
  std::vector<std::string> bindings = PretrainBindings();
  bindings.push_back("adafactor.Adafactor.no_such_arg = 3");
  bindings.push_back("partitioning.PjitPartitioner.num_partitions = 2");
  bindings.push_back("infer_eval/utils.DatasetConfig.split = 'test'");
  absl::StatusOr<GinConversion> c = Convert({"models/t5_1_1_small.gin", "runs/pretrain.gin"}, bindings, true);
  ASSERT_THAT(c.status(), IsOk());
  ASSERT_EQ(c->warnings.size(), 2u);
  EXPECT_THAT(c->warnings[0], HasSubstr("#10:1: partitioning.PjitPartitioner.num_partitions = 2"));
  EXPECT_THAT(c->warnings[1], HasSubstr("#9:1: adafactor.Adafactor.no_such_arg = 3: Trainyard has no counterpart"));
  bool noted = false;
  for (const std::string& n : c->notes) noted |= absl::StrContains(n, "infer_eval/utils.DatasetConfig.split: not used");
  EXPECT_TRUE(noted);
}

// The names T5X's gin files use for T5's tasks: definitions over TFDS with
// T5's source, chain and metric, the model's vocabulary.
TEST(T5xJobTest, T5sWellKnownTasksBecomeDefinitionsOverTfds) {
  std::vector<std::string> bindings = PretrainBindings();
  bindings.push_back("MIXTURE_OR_TASK_NAME = 'wmt_t2t_ende_v003'");
  absl::StatusOr<GinConversion> c =
      Convert({"models/t5_1_1_small.gin", "runs/pretrain.gin"}, bindings, false, "/data/tfds");
  ASSERT_THAT(c.status(), IsOk());
  const JobSpec& s = c->spec;
  EXPECT_EQ(s.task(), "wmt_t2t_ende_v003");
  ASSERT_EQ(s.task_definitions_size(), 1);  // train and train_eval name the same task
  const TaskDefinition& d = s.task_definitions(0);
  EXPECT_EQ(d.name(), "wmt_t2t_ende_v003");
  ASSERT_EQ(d.splits_size(), 3);
  EXPECT_EQ(d.splits().at("train"), "tfds:wmt_t2t_translate/de-en:1.0.0:train");
  EXPECT_EQ(d.splits().at("validation"), "tfds:wmt_t2t_translate/de-en:1.0.0:validation");
  EXPECT_EQ(d.tfds_data_dir(), "/data/tfds");
  EXPECT_EQ(d.vocabulary(), "/data/spm.model");
  ASSERT_EQ(d.preprocessors_size(), 1);
  EXPECT_EQ(d.preprocessors(0).translate().source_language(), "en");
  EXPECT_EQ(d.preprocessors(0).translate().target_language(), "de");
  EXPECT_EQ(std::vector<std::string>(d.metric_fns().begin(), d.metric_fns().end()), std::vector<std::string>{"bleu"});
  bool noted = false;
  for (const std::string& n : c->notes) {
    noted |= absl::StrContains(n, "task wmt_t2t_ende_v003: T5's definition over TFDS wmt_t2t_translate/de-en:1.0.0");
  }
  EXPECT_TRUE(noted);
  JobSpec validated = s;
  EXPECT_THAT(ValidateAndNormalize(&validated), IsOk());

  // Pretraining on C4: T5's rekey and span corruption, 100 sentinels.
  bindings.push_back("MIXTURE_OR_TASK_NAME = 'c4_v220_span_corruption'");
  c = Convert({"models/t5_1_1_small.gin", "runs/pretrain.gin"}, bindings, false, "/data/tfds");
  ASSERT_THAT(c.status(), IsOk());
  ASSERT_EQ(c->spec.task_definitions_size(), 1);
  const TaskDefinition& c4 = c->spec.task_definitions(0);
  EXPECT_EQ(c4.splits().at("train"), "tfds:c4/en:2.2.0:train");
  ASSERT_EQ(c4.preprocessors_size(), 2);
  EXPECT_EQ(c4.preprocessors(0).rekey().key_map().at("targets"), "text");
  EXPECT_TRUE(c4.preprocessors(1).has_span_corruption());
  validated = c->spec;
  ASSERT_THAT(ValidateAndNormalize(&validated), IsOk());
  EXPECT_EQ(validated.task_definitions(0).extra_ids(), 100);
}

TEST(T5xJobTest, T5TasksWhosePreprocessorsAreMissingAreRefusedWithTheirLine) {
  std::vector<std::string> bindings = PretrainBindings();
  bindings.push_back("MIXTURE_OR_TASK_NAME = 'glue_cola_v002'");
  absl::StatusOr<GinConversion> c = Convert({"models/t5_1_1_small.gin", "runs/pretrain.gin"}, bindings);
  EXPECT_THAT(c.status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train/utils.DatasetConfig.mixture_or_task_name = 'glue_cola_v002': T5's task "
                                 "glue_cola_v002 needs GLUE's text preprocessors")));
}

TEST(T5xJobTest, RequiredValuesLeftUnboundAreNamed) {
  absl::StatusOr<GinConversion> c =
      Convert({"models/t5_1_1_small.gin", "runs/pretrain.gin"}, {"MODEL_DIR = '/tmp/x'", "DROPOUT_RATE = 0.0"});
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("TRAIN_STEPS is %gin.REQUIRED (gin/testdata/t5x/runs/pretrain.gin:13); "
                                             "bind it: --gin-binding \"TRAIN_STEPS = ...\"")));
}

}  // namespace
}  // namespace trainyard
