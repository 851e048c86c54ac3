// Validation and normalisation of a JobSpec: one rule (or a few) per field,
// in the order of proto/job.proto, next to the defaults it fills in. The
// rules of the tasks (task_validation.h) and of output_dir
// (output_dir_validation.h) and of fault_tolerance
// (fault_tolerance_validation.h) have files of their own.
#include "spec/jobspec_validator.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "evaluation/metric_fns.h"
#include "re2/re2.h"
#include "spec/fault_tolerance_validation.h"
#include "spec/jobspec.h"
#include "spec/learning_rate_factors.h"
#include "spec/output_dir_validation.h"
#include "spec/presets.h"
#include "spec/task_validation.h"
#include "spec/validation_util.h"

namespace trainyard {
namespace {

using spec_internal::CheckIntRange;
using spec_internal::CheckPath;
using spec_internal::CheckRange;
using spec_internal::Errors;
using spec_internal::IsValidName;
using spec_internal::kInf;
using spec_internal::Quote;

constexpr int kMaxVocabSize = 1 << 22;

void ValidateModelConfig(Errors* errors, const ModelConfig& c) {
  CheckIntRange(errors, "model.config.vocab_size", c.vocab_size(), 2, kMaxVocabSize);
  CheckIntRange(errors, "model.config.d_model", c.d_model(), 1, 65536);
  CheckIntRange(errors, "model.config.num_heads", c.num_heads(), 1, 1024);
  CheckIntRange(errors, "model.config.d_kv", c.d_kv(), 1, 4096);
  CheckIntRange(errors, "model.config.d_ff", c.d_ff(), 1, 1 << 20);
  CheckIntRange(errors, "model.config.num_encoder_layers", c.num_encoder_layers(), 1, 256);
  CheckIntRange(errors, "model.config.num_decoder_layers", c.num_decoder_layers(), 1, 256);
  CheckIntRange(errors, "model.config.relative_attention_num_buckets", c.relative_attention_num_buckets(), 2, 1024);
  CheckIntRange(errors, "model.config.relative_attention_max_distance", c.relative_attention_max_distance(), 1,
                1 << 20);
  CheckRange(errors, "model.config.dropout_rate", c.dropout_rate(), 0, false, 1, true);
  CheckRange(errors, "model.config.layer_norm_epsilon", c.layer_norm_epsilon(), 0, true, 1, false);
}

void ValidateModel(Errors* errors, ModelSpec* model) {
  switch (model->architecture_case()) {
    case ModelSpec::kPreset: {
      absl::StatusOr<ModelConfig> config = PresetConfig(model->preset());
      if (!config.ok()) {
        errors->Add("model.preset", absl::StrCat(Quote(model->preset()),
                                                 " is not a preset; allowed: ", absl::StrJoin(PresetNames(), ", ")));
      }
      if (model->has_dropout_rate()) {
        CheckRange(errors, "model.dropout_rate", model->dropout_rate(), 0, false, 1, true);
      }
      if (model->has_vocab_size()) {
        CheckIntRange(errors, "model.vocab_size", model->vocab_size(), 2, kMaxVocabSize);
      }
      return;
    }
    case ModelSpec::kConfig:
      if (model->has_dropout_rate()) {
        errors->Add("model.dropout_rate",
                    "only applies to a preset; with an explicit config set "
                    "model.config.dropout_rate");
      }
      if (model->has_vocab_size()) {
        errors->Add("model.vocab_size",
                    "only applies to a preset; with an explicit config set "
                    "model.config.vocab_size");
      }
      FillModelConfigDefaults(model->mutable_config());
      ValidateModelConfig(errors, model->config());
      return;
    case ModelSpec::ARCHITECTURE_NOT_SET:
      errors->Add("model", absl::StrCat("missing; set model.preset (one of ", absl::StrJoin(PresetNames(), ", "),
                                        ") or an explicit model.config"));
      return;
  }
}

void ValidateOptimizer(Errors* errors, OptimizerConfig* opt) {
  if (opt->optimizer_case() == OptimizerConfig::OPTIMIZER_NOT_SET) opt->mutable_adafactor();
  CheckRange(errors, "optimizer.max_grad_norm", opt->max_grad_norm(), 0, false, kInf, true);
  if (opt->has_adafactor()) {
    Adafactor* a = opt->mutable_adafactor();
    FillAdafactorDefaults(a);
    CheckRange(errors, "optimizer.adafactor.decay_rate", a->decay_rate(), 0, true, 1, false);
    CheckRange(errors, "optimizer.adafactor.clipping_threshold", a->clipping_threshold(), 0, false, kInf, true);
    CheckRange(errors, "optimizer.adafactor.epsilon1", a->epsilon1(), 0, true, 1, false);
    CheckRange(errors, "optimizer.adafactor.epsilon2", a->epsilon2(), 0, false, 1, false);
    if (a->has_beta1()) {
      CheckRange(errors, "optimizer.adafactor.beta1", a->beta1(), 0, false, 1, true);
    }
    CheckIntRange(errors, "optimizer.adafactor.min_dim_size_to_factor", a->min_dim_size_to_factor(), 1, 1 << 30);
    CheckRange(errors, "optimizer.adafactor.weight_decay_rate", a->weight_decay_rate(), 0, false, 1, false);
  } else {
    AdamW* a = opt->mutable_adamw();
    FillAdamWDefaults(a);
    CheckRange(errors, "optimizer.adamw.beta1", a->beta1(), 0, false, 1, true);
    CheckRange(errors, "optimizer.adamw.beta2", a->beta2(), 0, false, 1, true);
    CheckRange(errors, "optimizer.adamw.epsilon", a->epsilon(), 0, true, 1, false);
    CheckRange(errors, "optimizer.adamw.weight_decay", a->weight_decay(), 0, false, 1, false);
  }
}

void ValidateLearningRate(Errors* errors, LearningRateSchedule* lr, int64_t total_steps, bool training) {
  if (lr->factors().empty()) lr->set_factors(kDefaultLearningRateFactors);
  if (!lr->has_base_learning_rate()) lr->set_base_learning_rate(1.0f);
  std::set<LearningRateFactor> factors;
  std::vector<std::string> canonical;
  for (absl::string_view raw : absl::StrSplit(lr->factors(), '*')) {
    const std::string name(absl::StripAsciiWhitespace(raw));
    const std::optional<LearningRateFactor> factor = ParseLearningRateFactor(name);
    if (!factor.has_value()) {
      errors->Add("learning_rate.factors",
                  absl::StrCat("unknown factor ", Quote(name), " in ", Quote(lr->factors()),
                               "; allowed factors, joined by '*': ", absl::StrJoin(LearningRateFactorNames(), ", ")));
      return;
    }
    if (!factors.insert(*factor).second) {
      errors->Add("learning_rate.factors",
                  absl::StrCat("factor ", Quote(name), " appears twice in ", Quote(lr->factors())));
      return;
    }
    canonical.push_back(name);
  }
  lr->set_factors(absl::StrJoin(canonical, " * "));
  CheckRange(errors, "learning_rate.base_learning_rate", lr->base_learning_rate(), 0, true, 1e6, false);
  CheckIntRange(errors, "learning_rate.warmup_steps", lr->warmup_steps(), 0, kMaxSteps);
  CheckIntRange(errors, "learning_rate.step_offset", lr->step_offset(), 0, kMaxSteps);
  CheckRange(errors, "learning_rate.min_learning_rate", lr->min_learning_rate(), 0, false, 1e6, false);
  // rsqrt_decay is 1/sqrt(max(step, warmup_steps)) and linear_warmup is
  // min(1, step/warmup_steps): both need warmup_steps > 0 (T5X's default).
  const auto any = [&](bool (*needs)(LearningRateFactor)) {
    for (LearningRateFactor f : factors) {
      if (needs(f)) return true;
    }
    return false;
  };
  if (any(NeedsWarmupSteps) && lr->warmup_steps() == 0) {
    lr->set_warmup_steps(10000);
  }
  if (any(NeedsStepsPerDecay)) {
    if (!lr->has_decay_factor()) lr->set_decay_factor(0.5f);
    CheckRange(errors, "learning_rate.decay_factor", lr->decay_factor(), 0, true, 1, false);
    if (lr->steps_per_decay() <= 0) {
      errors->Add("learning_rate.steps_per_decay", absl::StrCat(lr->steps_per_decay(),
                                                                "; the decay_every factor needs "
                                                                "steps_per_decay > 0"));
    }
  }
  if (any(NeedsStepsPerCycle)) {
    if (lr->steps_per_cycle() == 0 && training) lr->set_steps_per_cycle(total_steps);
    if (lr->steps_per_cycle() <= 0) {
      errors->Add("learning_rate.steps_per_cycle", absl::StrCat(lr->steps_per_cycle(),
                                                                "; cosine_decay and linear_decay need "
                                                                "steps_per_cycle > 0"));
    }
  }
}

// restore { mode: ALL } evaluates checkpoints one after another: only an
// EVALUATION or INFERENCE job can, and its wait only applies to it.
void ValidateRestoreAll(Errors* errors, const RestoreConfig& restore, JobKind kind) {
  constexpr int64_t kMaxWaitSeconds = 7 * 24 * 3600;
  CheckIntRange(errors, "restore.wait_seconds", restore.wait_seconds(), 0, kMaxWaitSeconds);
  if (restore.mode() != RestoreConfig::ALL) {
    if (restore.wait_seconds() != 0) errors->Add("restore.wait_seconds", "only applies with restore.mode: ALL");
    return;
  }
  if (kind != EVALUATION && kind != INFERENCE) {
    errors->Add("restore.mode", absl::StrCat("ALL is not allowed for a ", JobKind_Name(kind),
                                             " job; allowed for EVALUATION and INFERENCE jobs, which evaluate "
                                             "every checkpoint in turn (a training job restores one: LATEST, "
                                             "SPECIFIC or NONE)"));
  }
  if (restore.fallback_to_scratch()) {
    errors->Add("restore.fallback_to_scratch", "only applies with restore.mode: LATEST (ALL evaluates checkpoints)");
  }
}

void ValidateRestore(Errors* errors, RestoreConfig* restore, JobKind kind) {
  if (restore->mode() == RestoreConfig::MODE_UNSPECIFIED) restore->set_mode(RestoreConfig::LATEST);
  if (!restore->has_strict()) restore->set_strict(true);
  if (!restore->path().empty()) CheckPath(errors, "restore.path", restore->path());
  if (restore->dtype() == BFLOAT16) {
    errors->Add("restore.dtype",
                "BFLOAT16: restored parameters are float32 master weights whatever the checkpoint "
                "holds; `dtype` sets the computation's type, checkpoint.save_dtype what is saved");
  }
  CheckIntRange(errors, "restore.step", restore->step(), 0, kMaxSteps);
  if (restore->mode() == RestoreConfig::SPECIFIC && restore->path().empty() && restore->step() == 0) {
    errors->Add("restore.mode",
                "SPECIFIC needs restore.path (a checkpoint directory) or "
                "restore.step (> 0, in output_dir)");
  }
  if (restore->mode() != RestoreConfig::SPECIFIC && restore->step() != 0) {
    errors->Add("restore.step", "only applies with restore.mode: SPECIFIC");
  }
  if (kind == FINETUNING && (restore->mode() == RestoreConfig::NONE || restore->path().empty())) {
    errors->Add("restore.path",
                "a FINETUNING job starts from a checkpoint: set restore.path "
                "(and a restore.mode other than NONE)");
  }
  if ((kind == EVALUATION || kind == INFERENCE) && restore->mode() == RestoreConfig::NONE) {
    errors->Add("restore.mode", absl::StrCat("NONE is not allowed for a ", JobKind_Name(kind),
                                             " job, which needs a trained checkpoint"));
  }
  ValidateRestoreAll(errors, *restore, kind);
  for (int i = 0; i < restore->assignment_map_size(); ++i) {
    const RestoreConfig::Rename& rename = restore->assignment_map(i);
    const std::string field = absl::StrCat("restore.assignment_map[", i, "].pattern");
    if (rename.pattern().empty()) {
      errors->Add(field, "empty; give an RE2 regular expression over checkpoint tensor names");
      continue;
    }
    RE2 re(rename.pattern(), RE2::Quiet);
    if (!re.ok()) {
      errors->Add(field, absl::StrCat(Quote(rename.pattern()), " is not a valid RE2 regular expression: ", re.error()));
      continue;
    }
    std::string rewrite_error;
    if (!rename.replacement().empty() && !re.CheckRewriteString(rename.replacement(), &rewrite_error)) {
      errors->Add(absl::StrCat("restore.assignment_map[", i, "].replacement"),
                  absl::StrCat(Quote(rename.replacement()), ": ", rewrite_error));
    }
  }
}

void ValidateEarlyStopping(Errors* errors, const std::string& prefix, EarlyStopping* es) {
  if (es->metric().empty()) errors->Add(prefix + ".metric", "missing; e.g. \"loss\"");
  if (es->mode() == EarlyStopping::MODE_UNSPECIFIED) {
    errors->Add(prefix + ".mode", "missing; MIN (stop when the metric stops falling) or MAX");
  }
  if (!es->has_patience()) es->set_patience(3);
  CheckIntRange(errors, prefix + ".patience", es->patience(), 1, 1000000);
  CheckRange(errors, prefix + ".atol", es->atol(), 0, false, kInf, true);
  CheckRange(errors, prefix + ".rtol", es->rtol(), 0, false, kInf, true);
}

// The decoding fields of an InferenceConfig (jobs and sessions alike):
// defaults by method, ranges, and the options of other methods refused.
void ValidateDecoding(Errors* errors, InferenceConfig* inference, int default_max_decode_length) {
  if (inference->method() == InferenceConfig::METHOD_UNSPECIFIED) {
    inference->set_method(InferenceConfig::GREEDY);
  }
  if (!InferenceConfig::Method_IsValid(inference->method())) {
    errors->Add("inference.method", absl::StrCat(inference->method(), " is not a method; GREEDY, BEAM or SAMPLE"));
  }
  if (inference->method() == InferenceConfig::BEAM) {
    if (inference->beam_size() == 0) inference->set_beam_size(4);
    if (!inference->has_alpha()) inference->set_alpha(0.6f);
    CheckIntRange(errors, "inference.beam_size", inference->beam_size(), 1, 256);
    CheckRange(errors, "inference.alpha", inference->alpha(), 0, false, 10, false);
  } else {
    if (inference->beam_size() != 0) errors->Add("inference.beam_size", "only applies with inference.method: BEAM");
    if (inference->has_alpha()) errors->Add("inference.alpha", "only applies with inference.method: BEAM");
  }
  if (inference->method() == InferenceConfig::SAMPLE) {
    if (!inference->has_temperature()) inference->set_temperature(1.0f);
    CheckRange(errors, "inference.temperature", inference->temperature(), 0, true, 100, false);
    CheckIntRange(errors, "inference.top_k", inference->top_k(), 0, 1 << 22);
    CheckRange(errors, "inference.top_p", inference->top_p(), 0, false, 1, false);
  } else if (inference->top_k() != 0 || inference->top_p() != 0 || inference->has_temperature() ||
             inference->has_seed()) {
    errors->Add("inference", "temperature, top_k, top_p and seed only apply with method: SAMPLE");
  }
  if (inference->seed() < 0) errors->Add("inference.seed", absl::StrCat(inference->seed(), "; must be >= 0"));
  if (inference->max_decode_length() == 0) inference->set_max_decode_length(default_max_decode_length);
  CheckIntRange(errors, "inference.max_decode_length", inference->max_decode_length(), 1, kMaxFeatureLength);
}

void ValidateActions(Errors* errors, JobSpec* spec) {
  const std::set<std::string> eval_tasks(spec->eval().tasks().begin(), spec->eval().tasks().end());
  for (int i = 0; i < spec->actions_size(); ++i) {
    ActionConfig* action = spec->mutable_actions(i);
    const std::string prefix = absl::StrCat("actions[", i, "]");
    if (action->on() == ACTION_MODE_UNSPECIFIED) action->set_on(ACTION_TRAIN_EVAL);
    std::string task;
    std::string task_field;
    switch (action->action_case()) {
      case ActionConfig::kEarlyStopping:
        ValidateEarlyStopping(errors, prefix + ".early_stopping", action->mutable_early_stopping());
        task = action->early_stopping().task();
        task_field = prefix + ".early_stopping.task";
        break;
      case ActionConfig::kTerminateOnNan:
        if (action->terminate_on_nan().metric().empty()) {
          action->mutable_terminate_on_nan()->set_metric("loss");
        }
        task = action->terminate_on_nan().task();
        task_field = prefix + ".terminate_on_nan.task";
        break;
      case ActionConfig::ACTION_NOT_SET:
        errors->Add(prefix, "set one of early_stopping, terminate_on_nan");
        continue;
    }
    switch (action->on()) {
      case ACTION_TRAIN:
        if (task != "train") {
          errors->Add(task_field, absl::StrCat(Quote(task),
                                               "; an action on ACTION_TRAIN sees "
                                               "only the \"train\" metrics"));
        }
        break;
      case ACTION_TRAIN_EVAL:
      case ACTION_INFER_EVAL:
        if (action->on() == ACTION_INFER_EVAL && !spec->eval().infer_metrics()) {
          errors->Add(prefix + ".on", "ACTION_INFER_EVAL acts on inference metrics: set eval.infer_metrics: true");
        }
        if (spec->eval_period() <= 0) {
          errors->Add(prefix + ".on",
                      absl::StrCat(ActionMode_Name(action->on()), " needs periodic evaluation: set eval_period > 0"));
        } else if (!eval_tasks.count(task)) {
          errors->Add(
              task_field,
              absl::StrCat(Quote(task), " is not an eval task; allowed: ", absl::StrJoin(spec->eval().tasks(), ", ")));
        }
        break;
      default:
        errors->Add(prefix + ".on", absl::StrCat(action->on(), " is not an ActionMode"));
    }
  }
}

void ValidateName(Errors* errors, const std::string& name) {
  if (name.empty()) {
    errors->Add("name", "missing; a short name such as \"t5-small-wmt\"");
  } else if (!IsValidName(name, "_.-", 128)) {
    errors->Add("name", absl::StrCat(Quote(name),
                                     " is not allowed; use 1-128 of [A-Za-z0-9_.-], starting with "
                                     "a letter or digit"));
  }
}

// data_parallel: bucket size, sharding (NONE by default) and the overlap of
// the all-gather, with what sharding PARAMETERS cannot do.
void ValidateDataParallel(Errors* errors, JobSpec* spec) {
  DataParallelConfig* dp = spec->mutable_data_parallel();
  if (!dp->has_overlap_allreduce()) dp->set_overlap_allreduce(true);
  if (dp->bucket_mb() == 0) dp->set_bucket_mb(4);
  CheckIntRange(errors, "data_parallel.bucket_mb", dp->bucket_mb(), 1, 1024);
  if (dp->sharding() == DataParallelConfig::SHARDING_UNSPECIFIED) dp->set_sharding(DataParallelConfig::NONE);
  if (dp->sharding() == DataParallelConfig::PARAMETERS) {
    if (dp->has_overlap_allgather() && !dp->overlap_allgather()) {
      errors->Add("data_parallel.overlap_allgather",
                  "false with sharding PARAMETERS, which gathers each layer just before its use (nothing is "
                  "held whole to gather after the update); leave it unset or true");
    }
    if (spec->summary().weight_metrics()) {
      errors->Add("summary.weight_metrics",
                  "not computed with sharding PARAMETERS: they read every parameter before and after each "
                  "update, and each rank holds only its shard; use GRADIENTS for weight metrics");
    }
  }
  if (dp->shard_group_size() != 0) {
    const int workers = std::max(spec->num_workers(), 1);
    if (dp->sharding() == DataParallelConfig::NONE) {
      errors->Add("data_parallel.shard_group_size",
                  absl::StrCat(dp->shard_group_size(),
                               " with sharding NONE, where nothing is sharded; it applies to "
                               "OPTIMIZER, GRADIENTS and PARAMETERS"));
    } else if (dp->shard_group_size() < 2 || workers % dp->shard_group_size() != 0) {
      errors->Add("data_parallel.shard_group_size",
                  absl::StrCat(dp->shard_group_size(), " does not divide num_workers ", workers,
                               " into groups of 2 or more; allowed: a divisor of num_workers from 2 (or 0: one "
                               "group of every worker)"));
    }
  }
  if (dp->reproducible()) {
    if (!IsTrainingKind(spec->kind())) {
      errors->Add("data_parallel.reproducible",
                  absl::StrCat("true for a job of kind ", JobKind_Name(spec->kind()),
                               ", which does not train; predictions are the same on any number of workers "
                               "already (sampling is keyed by the example)"));
    }
  }
  if (dp->sharding() == DataParallelConfig::NONE) {
    if (dp->has_overlap_allgather()) {
      errors->Add("data_parallel.overlap_allgather",
                  "set with sharding NONE, where every rank updates every parameter and nothing is all-gathered; "
                  "it applies to OPTIMIZER and GRADIENTS");
    }
  } else if (!dp->has_overlap_allgather()) {
    dp->set_overlap_allgather(true);
  }
}

// num_workers, num_microbatches (1 by default) and batch_size: in range, and
// the global batch splits into equal microbatches on every worker.
void ValidateBatchSplit(Errors* errors, JobSpec* spec) {
  if (spec->num_microbatches() == 0) spec->set_num_microbatches(1);
  if (spec->num_workers() == 0) spec->set_num_workers(1);
  CheckIntRange(errors, "num_workers", spec->num_workers(), 1, kMaxWorkers);
  CheckIntRange(errors, "num_microbatches", spec->num_microbatches(), 1, kMaxBatchSize);
  CheckIntRange(errors, "batch_size", spec->batch_size(), 1, kMaxBatchSize);
  if (spec->batch_size() >= 1 && spec->num_workers() >= 1 && spec->num_microbatches() >= 1) {
    const int64_t per_step = static_cast<int64_t>(spec->num_workers()) * spec->num_microbatches();
    if (spec->batch_size() % per_step != 0) {
      errors->Add("batch_size", absl::StrCat(spec->batch_size(),
                                             " is not divisible by num_workers x "
                                             "num_microbatches = ",
                                             spec->num_workers(), " x ", spec->num_microbatches(), " = ", per_step,
                                             "; every worker's share of the global batch must split into "
                                             "equal microbatches"));
    }
  }
}

// total_steps (at least 1 for training) and the periods of evaluation,
// checkpoints and summaries (every 100 steps by default, or at the end of a
// shorter job).
void ValidateSteps(Errors* errors, JobSpec* spec, bool training) {
  if (training) {
    CheckIntRange(errors, "total_steps", spec->total_steps(), 1, kMaxSteps);
  } else {
    CheckIntRange(errors, "total_steps", spec->total_steps(), 0, kMaxSteps);
  }
  CheckIntRange(errors, "eval_period", spec->eval_period(), 0, kMaxSteps);
  CheckIntRange(errors, "checkpoint_period", spec->checkpoint_period(), 0, kMaxSteps);
  CheckIntRange(errors, "summary_period", spec->summary_period(), 0, kMaxSteps);
  if (spec->summary_period() == 0) {
    spec->set_summary_period(spec->total_steps() > 0 && spec->total_steps() < 100 ? spec->total_steps() : 100);
  }
}

void ValidateLoss(Errors* errors, LossConfig* loss) {
  if (!loss->has_z_loss()) loss->set_z_loss(1e-4f);
  CheckRange(errors, "loss.z_loss", loss->z_loss(), 0, false, 1, false);
  CheckRange(errors, "loss.label_smoothing", loss->label_smoothing(), 0, false, 1, true);
  if (loss->normalization() == LossConfig::NORMALIZATION_UNSPECIFIED) {
    loss->set_normalization(LossConfig::NUM_TARGET_TOKENS);
  }
  if (loss->normalization() == LossConfig::CONSTANT) {
    CheckRange(errors, "loss.normalizing_constant", loss->normalizing_constant(), 0, true, kInf, true);
  } else if (loss->normalizing_constant() != 0) {
    errors->Add("loss.normalizing_constant", "only applies with loss.normalization: CONSTANT");
  }
}

void ValidateData(Errors* errors, DataConfig* data) {
  if (data->train_split().empty()) data->set_train_split("train");
  if (!IsValidName(data->train_split(), "_.-", 64)) {
    errors->Add("data.train_split",
                absl::StrCat(Quote(data->train_split()), " is not a split name; use [A-Za-z0-9_.-]"));
  }
  if (!data->has_pack()) data->set_pack(true);
  if (!data->has_shuffle()) data->set_shuffle(true);
  if (!data->vocabulary().empty()) {
    errors->Add("data.vocabulary",
                "a vocabulary for the whole job is not supported: each task has its own (the "
                "bundled task's, or task_definitions[].vocabulary)");
  }
}

// checkpoint: save_dtype and async defaults; keep_best with the metric and
// mode it ranks by.
void ValidateCheckpoint(Errors* errors, CheckpointConfig* checkpoint) {
  if (checkpoint->save_dtype() == DTYPE_UNSPECIFIED) checkpoint->set_save_dtype(FLOAT32);
  if (!checkpoint->has_async()) checkpoint->set_async(true);
  CheckIntRange(errors, "checkpoint.keep_best", checkpoint->keep_best(), 0, 1000000);
  if (checkpoint->keep_best() > 0) {
    const std::vector<std::string> parts = absl::StrSplit(checkpoint->best_metric(), '/');
    if (parts.size() < 2 || parts[0].empty() || parts.back().empty()) {
      errors->Add("checkpoint.best_metric", absl::StrCat(Quote(checkpoint->best_metric()),
                                                         "; keep_best needs a metric named \"<task>/<metric>\", e.g. "
                                                         "\"validation/loss\""));
    }
    if (checkpoint->best_mode() == EarlyStopping::MODE_UNSPECIFIED) {
      errors->Add("checkpoint.best_mode", "missing; MIN or MAX (which value is best)");
    }
  }
}

}  // namespace

absl::Status NormalizeDecoding(InferenceConfig* inference, int default_max_decode_length) {
  Errors errors;
  ValidateDecoding(&errors, inference, default_max_decode_length);
  return errors.ToStatus();
}

void FillAdafactorDefaults(Adafactor* a) {
  if (!a->has_decay_rate()) a->set_decay_rate(0.8f);
  if (!a->has_clipping_threshold()) a->set_clipping_threshold(1.0f);
  if (!a->has_multiply_by_parameter_scale()) a->set_multiply_by_parameter_scale(true);
  if (!a->has_epsilon1()) a->set_epsilon1(1e-30f);
  if (!a->has_epsilon2()) a->set_epsilon2(1e-3f);
  if (!a->has_min_dim_size_to_factor()) a->set_min_dim_size_to_factor(128);
  if (!a->has_weight_decay_rate()) a->set_weight_decay_rate(0.0f);
}

void FillAdamWDefaults(AdamW* a) {
  if (!a->has_beta1()) a->set_beta1(0.9f);
  if (!a->has_beta2()) a->set_beta2(0.999f);
  if (!a->has_epsilon()) a->set_epsilon(1e-8f);
  if (!a->has_weight_decay()) a->set_weight_decay(0.01f);
}

absl::Status ValidateAndNormalize(JobSpec* spec, const ValidationOptions& options) {
  Errors errors;
  if (spec->kind() == JOB_KIND_UNSPECIFIED) spec->set_kind(TRAIN);
  if (!JobKind_IsValid(spec->kind())) {
    errors.Add("kind", absl::StrCat(spec->kind(), " is not a JobKind"));
  }
  const bool training = IsTrainingKind(spec->kind());
  ValidateName(&errors, spec->name());

  if (!spec->has_model()) spec->mutable_model();
  ValidateModel(&errors, spec->mutable_model());

  const FeatureLengths& lengths = spec->feature_lengths();
  CheckIntRange(&errors, "feature_lengths.inputs", lengths.inputs(), 1, kMaxFeatureLength);
  CheckIntRange(&errors, "feature_lengths.targets", lengths.targets(), 1, kMaxFeatureLength);

  ValidateDataParallel(&errors, spec);
  ValidateBatchSplit(&errors, spec);

  ValidateSteps(&errors, spec, training);
  CheckIntRange(&errors, "keep_checkpoints", spec->keep_checkpoints(), 0, 1000000);
  if (!spec->has_seed()) spec->set_seed(0);
  if (!spec->has_max_restarts()) spec->set_max_restarts(3);
  CheckIntRange(&errors, "max_restarts", spec->max_restarts(), 0, kMaxRestarts);
  spec_internal::ValidateFaultTolerance(&errors, spec, training);
  if (spec->dtype() == DTYPE_UNSPECIFIED) spec->set_dtype(FLOAT32);

  spec_internal::ValidateOutputDir(&errors, spec, options);

  if (!spec->has_optimizer()) spec->mutable_optimizer();
  ValidateOptimizer(&errors, spec->mutable_optimizer());
  if (!spec->has_learning_rate()) spec->mutable_learning_rate();
  ValidateLearningRate(&errors, spec->mutable_learning_rate(), spec->total_steps(), training);
  if (!spec->has_restore()) spec->mutable_restore();
  ValidateRestore(&errors, spec->mutable_restore(), spec->kind());

  ValidateLoss(&errors, spec->mutable_loss());
  ValidateData(&errors, spec->mutable_data());

  // task, task_definitions, mixture_definitions, eval.tasks.
  spec_internal::ValidateTasks(&errors, spec);
  EvalConfig* eval = spec->mutable_eval();
  if (eval->split().empty()) eval->set_split("validation");
  CheckIntRange(&errors, "eval.num_batches", eval->num_batches(), 0, 1 << 30);

  InferenceConfig* inference = spec->mutable_inference();
  ValidateDecoding(&errors, inference, lengths.targets());
  if (inference->split().empty()) inference->set_split("validation");
  CheckIntRange(&errors, "inference.num_batches", inference->num_batches(), 0, 1 << 30);

  ValidateCheckpoint(&errors, spec->mutable_checkpoint());

  ValidateActions(&errors, spec);
  return errors.ToStatus();
}

}  // namespace trainyard
