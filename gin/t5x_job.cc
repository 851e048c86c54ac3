#include "gin/t5x_job.h"

#include <cctype>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "gin/t5x_converter.h"

namespace trainyard {
namespace gin_internal {

absl::Status Converter::MapTrainScript(const Call& train) {
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> total, Int(train, "total_steps", 1, int64_t{1} << 40));
  if (!total) return absl::InvalidArgumentError("train.total_steps is not bound: T5X requires it");
  spec_->set_total_steps(*total);
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> eval_period, Int(train, "eval_period", 0, int64_t{1} << 40));
  spec_->set_eval_period(eval_period.value_or(0));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> stats, Int(train, "stats_period", 1, int64_t{1} << 40));
  // T5X: stats_period defaults to eval_period.
  const int64_t summary = stats.value_or(spec_->eval_period());
  if (summary > 0) spec_->set_summary_period(summary);
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> seed, Int(train, "random_seed", 0, int64_t{1} << 62));
  if (seed) {
    spec_->set_seed(*seed);
  } else {
    spec_->set_seed(0);
    out_->notes.push_back(
        "train.random_seed is None: T5X draws a new seed each run; Trainyard's runs are reproducible, with seed 0");
  }
  TY_ASSIGN_OR_RETURN(std::optional<Bound> dir, Get(train, "model_dir"));
  if (!dir || dir->value.kind != GinValue::Kind::kString) {
    if (dir) return TypeError(*dir, "a folder as a string");
    return absl::InvalidArgumentError("train.model_dir is not bound (T5X's MODEL_DIR): bind it");
  }
  TY_RETURN_IF_ERROR(LocalPath(dir->value.s, *dir));
  spec_->set_output_dir(dir->value.s);
  spec_->set_name(NameFromFolder(dir->value.s));
  TY_ASSIGN_OR_RETURN(std::optional<Call> model, Callee(train, "model", {kEncoderDecoderModel}, true));
  if (!model) return absl::InvalidArgumentError("train.model is not bound (T5X's MODEL): bind it");
  TY_RETURN_IF_ERROR(MapModel(*model));
  TY_ASSIGN_OR_RETURN(std::optional<Call> data, Callee(train, "train_dataset_cfg", {kDatasetConfig}, true));
  if (!data) return absl::InvalidArgumentError("train.train_dataset_cfg is not bound: T5X requires it");
  TY_RETURN_IF_ERROR(MapTrainData(*data));
  TY_ASSIGN_OR_RETURN(std::optional<Call> eval, Callee(train, "train_eval_dataset_cfg", {kDatasetConfig}, true));
  if (eval) TY_RETURN_IF_ERROR(MapEvalData(*eval));
  TY_RETURN_IF_ERROR(Expect(train, "infer_eval_dataset_cfg", IsNone,
                            "inference evaluation during training is converted from train_eval_dataset_cfg's task "
                            "only: set it to None and `eval { infer_metrics: true }` in the spec"));
  TY_ASSIGN_OR_RETURN(std::optional<Call> checkpoint, Callee(train, "checkpoint_cfg", {kCheckpointConfig}, true));
  if (checkpoint) TY_RETURN_IF_ERROR(MapCheckpoint(*checkpoint));
  TY_ASSIGN_OR_RETURN(std::optional<Call> partitioner, Callee(train, "partitioner", {kPartitioner}, true));
  if (partitioner) TY_RETURN_IF_ERROR(MapPartitioner(*partitioner));
  TY_ASSIGN_OR_RETURN(std::optional<Call> trainer, Callee(train, "trainer_cls", {kTrainer}, false));
  if (trainer) TY_RETURN_IF_ERROR(MapTrainer(*trainer));
  return absl::OkStatus();
}

absl::Status Converter::MapTrainScriptSettings(const Call& train) {
  TY_RETURN_IF_ERROR(Expect(train, "relative_steps", IsNone,
                            "Trainyard's total_steps counts from step 0: give train.total_steps = the restored "
                            "step + the steps to train"));
  TY_RETURN_IF_ERROR(Expect(train, "use_hardware_rng", IsFalse,
                            "Trainyard draws random numbers from a software generator keyed by seed and step, the "
                            "same on every device; there is no hardware RNG mode"));
  TY_RETURN_IF_ERROR(Expect(train, "run_eval_before_training", IsFalse,
                            "Trainyard evaluates every eval_period steps, not before the first step"));
  TY_RETURN_IF_ERROR(Expect(train, "inference_evaluator_cls", RefersTo("seqio.Evaluator"),
                            "only seqio's Evaluator (Trainyard's built-in metric functions) is converted"));
  TY_RETURN_IF_ERROR(Expect(train, "get_dataset_fn", RefersTo("utils.get_dataset"),
                            "a Python dataset function cannot run in Trainyard: only T5X's utils.get_dataset"));
  TY_RETURN_IF_ERROR(Expect(train, "train_eval_get_dataset_fn", RefersTo("utils.get_training_eval_datasets"),
                            "a Python dataset function cannot run in Trainyard: only T5X's default"));
  TY_RETURN_IF_ERROR(Expect(train, "train_state_initializer_cls", RefersTo("utils.TrainStateInitializer"),
                            "a Python state initializer cannot run in Trainyard"));
  TY_RETURN_IF_ERROR(Expect(
      train, "verify_matching_vocabs_fn",
      [](const GinValue& v) { return v.is_none() || RefersTo("utils.verify_matching_vocabs")(v); },
      "Trainyard checks the task's vocabulary against the model's itself"));
  TY_RETURN_IF_ERROR(Note(train, "summarize_config_fn",
                          "T5X writes the gin config to TensorBoard; the converted spec is the run's record"));
  TY_RETURN_IF_ERROR(Note(train, "concurrent_metrics", "Trainyard always writes metrics in a background thread"));
  TY_RETURN_IF_ERROR(Note(train, "gc_period", "Python's garbage collector: nothing to collect in Trainyard"));
  TY_RETURN_IF_ERROR(Note(train, "use_orbax", "Trainyard writes its own checkpoint format (convert --to-t5x)"));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> eval_steps, Int(train, "eval_steps", 0, int64_t{1} << 31));
  if (eval_steps && spec_->eval().tasks_size() > 0) spec_->mutable_eval()->set_num_batches(*eval_steps);
  return absl::OkStatus();
}

absl::Status Converter::MapTrainData(const Call& data) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> task, Get(data, "mixture_or_task_name"));
  if (!task) return absl::InvalidArgumentError(absl::StrCat(data.Shown(), ".mixture_or_task_name is not bound"));
  if (task->value.kind != GinValue::Kind::kString) return TypeError(*task, "a task or mixture name");
  spec_->set_task(task->value.s);
  TY_RETURN_IF_ERROR(ResolveT5Task(*task));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> lengths, Get(data, "task_feature_lengths"));
  if (!lengths) return absl::InvalidArgumentError(absl::StrCat(data.Shown(), ".task_feature_lengths is not bound"));
  const GinValue& d = lengths->value;
  if (d.kind != GinValue::Kind::kDict) return TypeError(*lengths, "{'inputs': N, 'targets': M}");
  for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
    const GinValue& key = d.items[k];
    const GinValue& value = d.items[k + 1];
    if (value.kind != GinValue::Kind::kInt || value.i < 1 || value.i > 65536 || key.kind != GinValue::Kind::kString ||
        (key.s != "inputs" && key.s != "targets")) {
      return TypeError(*lengths, "{'inputs': N, 'targets': M} with lengths in [1, 65536]");
    }
    if (key.s == "inputs") spec_->mutable_feature_lengths()->set_inputs(static_cast<int32_t>(value.i));
    if (key.s == "targets") spec_->mutable_feature_lengths()->set_targets(static_cast<int32_t>(value.i));
  }
  TY_ASSIGN_OR_RETURN(std::optional<std::string> split, String(data, "split"));
  if (split) spec_->mutable_data()->set_train_split(*split);
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> batch, Int(data, "batch_size", 1, 1 << 24));
  if (!batch) return absl::InvalidArgumentError(absl::StrCat(data.Shown(), ".batch_size is not bound"));
  spec_->set_batch_size(static_cast<int32_t>(*batch));
  TY_ASSIGN_OR_RETURN(std::optional<bool> shuffle, Bool(data, "shuffle"));
  spec_->mutable_data()->set_shuffle(shuffle.value_or(true));
  TY_ASSIGN_OR_RETURN(std::optional<bool> pack, Bool(data, "pack"));
  spec_->mutable_data()->set_pack(pack.value_or(false));  // DatasetConfig's default
  TY_ASSIGN_OR_RETURN(std::optional<Bound> seed, Get(data, "seed"));
  if (seed && !seed->value.is_none() && spec_->data().shuffle() &&
      !(seed->value.kind == GinValue::Kind::kInt && seed->value.i == spec_->seed())) {
    TY_RETURN_IF_ERROR(Refuse(*seed,
                              "Trainyard shuffles with the job's seed (train.random_seed): bind this seed "
                              "to None or to train.random_seed's value"));
  }
  TY_RETURN_IF_ERROR(Expect(data, "use_cached", IsFalse,
                            "Trainyard preprocesses the task's own files as it trains; to train on seqio's cache of "
                            "a task, define a task whose splits are seqio_cache:DIR (--task-definitions) and bind "
                            "USE_CACHED_TASKS = False"));
  TY_RETURN_IF_ERROR(Expect(data, "module", IsNone,
                            "a Python module cannot register tasks in Trainyard: define the task in the spec "
                            "(--task-definitions) and bind module to None"));
  TY_RETURN_IF_ERROR(Expect(data, "trim_output_features", IsTrue, "Trainyard always cuts features to their lengths"));
  TY_RETURN_IF_ERROR(Expect(data, "runtime_preprocessors", IsEmpty, "Python preprocessors cannot run in Trainyard"));
  TY_RETURN_IF_ERROR(Note(data, "use_custom_packing_ops", "packing is the same either way"));
  TY_RETURN_IF_ERROR(Note(data, "use_memory_cache", "tf.data's cache: Trainyard reads its files as it goes"));
  return Note(data, "num_prefetch_threads", "tf.data's prefetching: Trainyard reads ahead on its own thread");
}

absl::Status Converter::MapEvalData(const Call& data) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> task, Get(data, "mixture_or_task_name"));
  if (!task) return absl::InvalidArgumentError(absl::StrCat(data.Shown(), ".mixture_or_task_name is not bound"));
  if (task->value.kind != GinValue::Kind::kString) return TypeError(*task, "a task or mixture name");
  spec_->mutable_eval()->add_tasks(task->value.s);
  TY_RETURN_IF_ERROR(ResolveT5Task(*task));
  TY_ASSIGN_OR_RETURN(std::optional<std::string> split, String(data, "split"));
  spec_->mutable_eval()->set_split(split.value_or("validation"));
  const int64_t batch = spec_->batch_size();
  TY_RETURN_IF_ERROR(Expect(
      data, "batch_size", [batch](const GinValue& v) { return v.kind == GinValue::Kind::kInt && v.i == batch; },
      absl::StrCat("Trainyard evaluates in batches of the job's batch_size (", batch, ")")));
  const FeatureLengths lengths = spec_->feature_lengths();
  TY_RETURN_IF_ERROR(Expect(
      data, "task_feature_lengths",
      [&lengths](const GinValue& v) {
        if (v.kind != GinValue::Kind::kDict) return false;
        for (size_t k = 0; k + 1 < v.items.size(); k += 2) {
          const int64_t want = v.items[k].s == "inputs" ? lengths.inputs() : lengths.targets();
          if (v.items[k + 1].kind != GinValue::Kind::kInt || v.items[k + 1].i != want) return false;
        }
        return true;
      },
      "Trainyard evaluates with the training feature lengths"));
  TY_RETURN_IF_ERROR(Expect(data, "pack", IsFalse,
                            "Trainyard evaluates unpacked, one example per row: bind "
                            "train_eval/utils.DatasetConfig.pack = False"));
  TY_RETURN_IF_ERROR(Expect(data, "shuffle", IsFalse,
                            "Trainyard evaluates the split in order (a fixed sample of it with eval_steps)"));
  TY_RETURN_IF_ERROR(Expect(data, "use_cached", IsFalse,
                            "Trainyard preprocesses the task's own files as it evaluates; for seqio's cache of a "
                            "task, define a task whose splits are seqio_cache:DIR and bind USE_CACHED_TASKS = False"));
  TY_RETURN_IF_ERROR(Expect(data, "module", IsNone, "a Python module cannot register tasks in Trainyard"));
  TY_RETURN_IF_ERROR(Note(data, "seed", "the evaluation reads the split in order: no shuffling seed"));
  TY_RETURN_IF_ERROR(Note(data, "use_custom_packing_ops", "evaluation is unpacked"));
  TY_RETURN_IF_ERROR(Note(data, "use_memory_cache", "tf.data's cache: Trainyard reads its files as it goes"));
  TY_RETURN_IF_ERROR(Note(data, "trim_output_features", "Trainyard always cuts features to their lengths"));
  return absl::OkStatus();
}

absl::Status Converter::MapCheckpoint(const Call& c) {
  TY_ASSIGN_OR_RETURN(std::optional<Call> save, Callee(c, "save", {kSaveConfig}, true));
  if (save) {
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> period, Int(*save, "period", 0, int64_t{1} << 40));
    spec_->set_checkpoint_period(period.value_or(0));
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> keep, Int(*save, "keep", 1, 1 << 30));
    spec_->set_keep_checkpoints(static_cast<int32_t>(keep.value_or(0)));
    TY_ASSIGN_OR_RETURN(std::optional<std::string> dtype, String(*save, "dtype"));
    if (dtype && *dtype != "float32" && *dtype != "bfloat16") {
      TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(*save, "dtype"));
      TY_RETURN_IF_ERROR(Refuse(*b, "Trainyard saves 'float32' or 'bfloat16'"));
    }
    spec_->mutable_checkpoint()->set_save_dtype(dtype.value_or("float32") == "bfloat16" ? BFLOAT16 : FLOAT32);
    TY_RETURN_IF_ERROR(
        Note(*save, "save_dataset", "Trainyard always saves the data position with the state (exact resume)"));
    TY_RETURN_IF_ERROR(Expect(*save, "checkpoint_steps", IsEmpty,
                              "Trainyard saves every `period` steps: list steps are not converted"));
    TY_RETURN_IF_ERROR(Expect(*save, "state_transformation_fns", IsEmpty, "Python functions cannot run in Trainyard"));
    TY_RETURN_IF_ERROR(Note(*save, "keep_dataset_checkpoints", "the data position is part of each checkpoint"));
    TY_RETURN_IF_ERROR(Note(*save, "checkpointer_cls", "Trainyard writes its own checkpoint format"));
    TY_RETURN_IF_ERROR(Note(*save, "checkpoint_manager_cls", "Trainyard writes its own checkpoint format"));
  }
  TY_ASSIGN_OR_RETURN(std::optional<Call> restore, Callee(c, "restore", {kRestoreConfig}, true));
  if (restore) TY_RETURN_IF_ERROR(MapRestore(*restore));
  return absl::OkStatus();
}

absl::Status Converter::MapRestore(const Call& c) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> path, Get(c, "path"));
  std::string dir;
  if (path && path->value.kind == GinValue::Kind::kString) dir = path->value.s;
  if (path && (path->value.kind == GinValue::Kind::kList || path->value.kind == GinValue::Kind::kTuple)) {
    if (path->value.items.size() > 1) TY_RETURN_IF_ERROR(Refuse(*path, "Trainyard restores from one path"));
    if (path->value.items.size() == 1) dir = path->value.items[0].s;
  }
  if (dir.empty()) return absl::OkStatus();  // from scratch (or the model_dir's newest: T5X's and ours)
  TY_RETURN_IF_ERROR(LocalPath(dir, *path));
  RestoreConfig* r = spec_->mutable_restore();
  spec_->set_kind(FINETUNING);
  r->set_path(dir);
  TY_ASSIGN_OR_RETURN(std::optional<std::string> mode, String(c, "mode"));
  if (!mode || *mode == "specific") {
    r->set_mode(RestoreConfig::SPECIFIC);
  } else if (*mode == "latest") {
    r->set_mode(RestoreConfig::LATEST);
  } else {
    TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(c, "mode"));
    TY_RETURN_IF_ERROR(Refuse(*b, "a training run restores 'specific' or 'latest'"));
  }
  TY_ASSIGN_OR_RETURN(std::optional<bool> strict, Bool(c, "strict"));
  r->set_strict(strict.value_or(true));
  TY_ASSIGN_OR_RETURN(std::optional<bool> fallback, Bool(c, "fallback_to_scratch"));
  r->set_fallback_to_scratch(fallback.value_or(false));
  TY_RETURN_IF_ERROR(Expect(
      c, "dtype", [](const GinValue& v) { return v.is_none() || v.ToString() == "'float32'"; },
      "Trainyard restores float32 master weights (a bfloat16 checkpoint is widened)"));
  TY_RETURN_IF_ERROR(Note(c, "restore_dataset", "a Trainyard checkpoint's data position is always restored"));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> map, Get(c, "assignment_map"));
  if (map && !map->value.is_none()) {
    for (const GinValue& pair : map->value.items) {
      if ((pair.kind != GinValue::Kind::kTuple && pair.kind != GinValue::Kind::kList) || pair.items.size() != 2 ||
          pair.items[0].kind != GinValue::Kind::kString ||
          (pair.items[1].kind != GinValue::Kind::kString && !pair.items[1].is_none())) {
        return TypeError(*map, "a list of (pattern, replacement or None) pairs");
      }
      RestoreConfig::Rename* rename = r->add_assignment_map();
      rename->set_pattern(pair.items[0].s);
      rename->set_replacement(pair.items[1].is_none() ? "" : pair.items[1].s);
    }
  }
  return Expect(c, "state_transformation_fns", IsEmpty, "Python functions cannot run in Trainyard");
}

absl::Status Converter::MapPartitioner(const Call& c) {
  TY_RETURN_IF_ERROR(Expect(
      c, "num_partitions", [](const GinValue& v) { return v.kind == GinValue::Kind::kInt && v.i == 1; },
      "Trainyard partitions data only (data_parallel, with sharded state: ZeRO 1-3); model parallelism over "
      "num_partitions > 1 is not built"));
  TY_RETURN_IF_ERROR(Expect(c, "model_parallel_submesh", IsNone, "Trainyard partitions data only"));
  TY_RETURN_IF_ERROR(Note(c, "logical_axis_rules", "names axes for model parallelism; data parallelism needs none"));
  return Note(c, "params_on_devices", "each worker holds the parameters its sharding mode gives it");
}

absl::Status Converter::MapActions(const Call& train) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> actions, Get(train, "actions"));
  if (!actions || IsEmpty(actions->value)) return absl::OkStatus();
  if (actions->value.kind != GinValue::Kind::kDict) return TypeError(*actions, "{'MODE': [@action(), ...]}");
  const GinValue& d = actions->value;
  for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
    const std::string mode = d.items[k].s;
    ActionMode on = mode == "TRAIN"        ? ACTION_TRAIN
                    : mode == "TRAIN_EVAL" ? ACTION_TRAIN_EVAL
                    : mode == "INFER_EVAL" ? ACTION_INFER_EVAL
                                           : ACTION_MODE_UNSPECIFIED;
    if (on == ACTION_MODE_UNSPECIFIED) return TypeError(*actions, "keys 'TRAIN', 'TRAIN_EVAL' or 'INFER_EVAL'");
    for (const GinValue& ref : d.items[k + 1].items) TY_RETURN_IF_ERROR(MapAction(ref, actions->where, on));
  }
  return absl::OkStatus();
}

absl::Status Converter::MapAction(const GinValue& ref, const GinLocation& where, ActionMode mode) {
  Bound b{ref, where, "train.actions"};
  TY_ASSIGN_OR_RETURN(std::optional<Call> action, CalleeOf(b, {kEarlyStopping, kTerminateOnNan}, true));
  if (!action) return absl::OkStatus();
  ActionConfig* a = spec_->add_actions();
  a->set_on(mode);
  if (action->name == kTerminateOnNan) {
    TY_ASSIGN_OR_RETURN(std::optional<std::string> task, String(*action, "task"));
    TY_ASSIGN_OR_RETURN(std::optional<std::string> metric, String(*action, "metric"));
    a->mutable_terminate_on_nan()->set_task(task.value_or("train"));
    a->mutable_terminate_on_nan()->set_metric(metric.value_or("loss"));
    return absl::OkStatus();
  }
  EarlyStopping* e = a->mutable_early_stopping();
  TY_ASSIGN_OR_RETURN(std::optional<Bound> metric, Get(*action, "metric"));
  if (!metric || metric->value.items.size() != 2) {
    if (metric) return TypeError(*metric, "a (task, metric) pair");
    return absl::InvalidArgumentError(absl::StrCat(action->Shown(), ".metric is not bound"));
  }
  e->set_task(metric->value.items[0].s);
  e->set_metric(metric->value.items[1].s);
  TY_ASSIGN_OR_RETURN(std::optional<std::string> m, String(*action, "mode"));
  if (m != "min" && m != "max")
    return absl::InvalidArgumentError(absl::StrCat(action->Shown(), ".mode: 'min' or 'max'"));
  e->set_mode(*m == "min" ? EarlyStopping::MIN : EarlyStopping::MAX);
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> patience, Int(*action, "patience", 1, 1 << 20));
  e->set_patience(static_cast<int32_t>(patience.value_or(3)));
  TY_ASSIGN_OR_RETURN(std::optional<double> atol, Float(*action, "atol", 0, 1e30));
  e->set_atol(static_cast<float>(atol.value_or(0)));
  TY_ASSIGN_OR_RETURN(std::optional<double> rtol, Float(*action, "rtol", 0, 1e30));
  e->set_rtol(static_cast<float>(rtol.value_or(0)));
  out_->notes.push_back(absl::StrCat(where.ToString(), ": ", action->Shown(),
                                     ": Trainyard stops after `patience` evaluations without a new best value; "
                                     "T5X compares each value with the one before it (docs/architecture.md)"));
  return absl::OkStatus();
}
}  // namespace gin_internal

absl::StatusOr<GinConversion> JobSpecFromGin(GinConfig* config, const GinConversionOptions& options) {
  GinConversion out;
  gin_internal::Converter converter(config, options, &out);
  TY_RETURN_IF_ERROR(converter.Run());
  return out;
}

}  // namespace trainyard
