#include "gin/t5x_job.h"

#include <cctype>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

// T5X's configurables by the end of their module paths.
constexpr char kTrain[] = "__main__.train";
constexpr char kDatasetConfig[] = "utils.DatasetConfig";
constexpr char kEncoderDecoderModel[] = "models.EncoderDecoderModel";
constexpr char kTransformer[] = "network.Transformer";
constexpr char kT5Config[] = "network.T5Config";
constexpr char kVocabulary[] = "SentencePieceVocabulary";  // seqio. or seqio.vocabularies.
constexpr char kAdafactor[] = "adafactor.Adafactor";
constexpr char kAdamW[] = "optimizers.adamw";
constexpr char kChain[] = "optimizers.chain";
constexpr char kClipByGlobalNorm[] = "optax.clip_by_global_norm";
constexpr char kTrainer[] = "trainer.Trainer";
constexpr char kSchedule[] = "utils.create_learning_rate_scheduler";
constexpr char kWeightMetrics[] = "trainer.WeightMetricsComputer";
constexpr char kCheckpointConfig[] = "utils.CheckpointConfig";
constexpr char kSaveConfig[] = "utils.SaveCheckpointConfig";
constexpr char kRestoreConfig[] = "utils.RestoreCheckpointConfig";
constexpr char kPartitioner[] = "partitioning.PjitPartitioner";
constexpr char kBeamSearch[] = "decoding.beam_search";
constexpr char kTemperatureSample[] = "decoding.temperature_sample";
constexpr char kEarlyStopping[] = "trainer.EarlyStoppingAction";
constexpr char kTerminateOnNan[] = "trainer.TerminateOnNanAction";

// A bound argument: its resolved value, where it was bound, and its name
// for messages ("train/utils.DatasetConfig.batch_size").
struct Bound {
  GinValue value;
  GinLocation where;
  std::string key;
};

// A configurable as T5X's code calls it: its name and the scope it is
// called in.
struct Call {
  std::string name;
  std::string scope;
  std::string Shown() const { return scope.empty() ? name : scope + "/" + name; }
};

class Converter {
 public:
  Converter(GinConfig* config, const GinConversionOptions& options, GinConversion* out)
      : config_(config), options_(options), out_(out), spec_(&out->spec) {}

  absl::Status Run();

 private:
  // --- reading arguments ---
  absl::StatusOr<std::optional<Bound>> Get(const Call& call, const std::string& arg);
  absl::StatusOr<std::optional<int64_t>> Int(const Call& call, const std::string& arg, int64_t lo, int64_t hi);
  absl::StatusOr<std::optional<double>> Float(const Call& call, const std::string& arg, double lo, double hi);
  absl::StatusOr<std::optional<bool>> Bool(const Call& call, const std::string& arg);
  absl::StatusOr<std::optional<std::string>> String(const Call& call, const std::string& arg);
  // The configurable a reference argument calls (one of `allowed`), or
  // nullopt for None / unbound.
  absl::StatusOr<std::optional<Call>> Callee(const Call& call, const std::string& arg,
                                             const std::vector<std::string>& allowed, bool evaluated);
  absl::StatusOr<std::optional<Call>> CalleeOf(const Bound& b, const std::vector<std::string>& allowed, bool evaluated);
  // Not honoured: an error, or a warning with allow_unmapped.
  absl::Status Refuse(const Bound& b, const std::string& why);
  // Accepted only when `ok`; otherwise refused with `why`.
  absl::Status Expect(const Call& call, const std::string& arg, const std::function<bool(const GinValue&)>& ok,
                      const std::string& why);
  // Read and noted: T5X settings with nothing to do in Trainyard.
  absl::Status Note(const Call& call, const std::string& arg, const std::string& why);

  // --- configurables ---
  absl::Status MapTrainScript(const Call& train);
  absl::Status MapTrainScriptSettings(const Call& train);
  absl::Status MapTrainData(const Call& data);
  absl::Status MapEvalData(const Call& data);
  absl::Status MapModel(const Call& model);
  absl::Status MapNetwork(const Call& config);
  absl::Status MapVocabulary(const Call& model);
  absl::Status MapAdafactor(const Call& adafactor);
  absl::Status MapOptimizer(const Call& model);
  absl::Status MapAdamW(const Call& adamw);
  absl::Status MapDecoding(const Call& model);
  absl::Status MapTrainer(const Call& trainer);
  absl::Status MapSchedule(const Call& schedule);
  absl::Status MapCheckpoint(const Call& checkpoint);
  absl::Status MapRestore(const Call& restore);
  absl::Status MapPartitioner(const Call& partitioner);
  absl::Status MapActions(const Call& train);
  absl::Status MapAction(const GinValue& ref, const GinLocation& where, ActionMode mode);
  absl::Status CheckUnused();

  GinConfig* config_;
  const GinConversionOptions& options_;
  GinConversion* out_;
  JobSpec* spec_;
  std::vector<Call> called_;
  std::string vocabulary_;  // the model's, "" when unbound
  std::optional<int64_t> extra_ids_;
};

std::string Quoted(const GinValue& v) { return v.ToString(); }

absl::Status TypeError(const Bound& b, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(b.where.ToString(), ": ", b.key, " = ", Quoted(b.value), ": expected ", want));
}

absl::StatusOr<std::optional<Bound>> Converter::Get(const Call& call, const std::string& arg) {
  const GinConfig::Binding* binding = config_->Find(call.scope, call.name, arg);
  if (binding == nullptr) return std::optional<Bound>();
  Bound b;
  const GinStatement& st = binding->statement;
  b.where = st.location;
  b.key = (st.scope.empty() ? "" : st.scope + "/") + st.selector + "." + st.arg;
  TY_ASSIGN_OR_RETURN(b.value, config_->Resolve(binding->statement.value, b.where));
  return std::optional<Bound>(std::move(b));
}

absl::StatusOr<std::optional<int64_t>> Converter::Int(const Call& call, const std::string& arg, int64_t lo,
                                                      int64_t hi) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<int64_t>();
  if (b->value.kind != GinValue::Kind::kInt || b->value.i < lo || b->value.i > hi) {
    return TypeError(*b, absl::StrCat("an integer in [", lo, ", ", hi, "]"));
  }
  return std::optional<int64_t>(b->value.i);
}

absl::StatusOr<std::optional<double>> Converter::Float(const Call& call, const std::string& arg, double lo, double hi) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<double>();
  if (!b->value.is_number() || !(b->value.number() >= lo && b->value.number() <= hi)) {
    return TypeError(*b, absl::StrCat("a number in [", lo, ", ", hi, "]"));
  }
  return std::optional<double>(b->value.number());
}

absl::StatusOr<std::optional<bool>> Converter::Bool(const Call& call, const std::string& arg) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<bool>();
  if (b->value.kind != GinValue::Kind::kBool) return TypeError(*b, "True or False");
  return std::optional<bool>(b->value.b);
}

absl::StatusOr<std::optional<std::string>> Converter::String(const Call& call, const std::string& arg) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<std::string>();
  if (b->value.kind != GinValue::Kind::kString) return TypeError(*b, "a string");
  return std::optional<std::string>(b->value.s);
}

absl::StatusOr<std::optional<Call>> Converter::Callee(const Call& call, const std::string& arg,
                                                      const std::vector<std::string>& allowed, bool evaluated) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<Call>();
  return CalleeOf(*b, allowed, evaluated);
}

absl::StatusOr<std::optional<Call>> Converter::CalleeOf(const Bound& b, const std::vector<std::string>& allowed,
                                                        bool evaluated) {
  const GinValue& v = b.value;
  const std::string shape = evaluated ? "@NAME()" : "@NAME";
  if (v.kind != GinValue::Kind::kReference || v.evaluate != evaluated) {
    return TypeError(b, absl::StrCat("a reference ", shape, " to one of ", absl::StrJoin(allowed, ", ")));
  }
  const size_t slash = v.s.rfind('/');
  Call call;
  call.scope = slash == std::string::npos ? "" : v.s.substr(0, slash);
  const std::string name = config_->ExpandAliases(slash == std::string::npos ? v.s : v.s.substr(slash + 1));
  for (const std::string& a : allowed) {
    if (GinSelectorMatches(name, a)) {
      call.name = a;
      called_.push_back(call);
      return std::optional<Call>(call);
    }
  }
  TY_RETURN_IF_ERROR(Refuse(b, absl::StrCat("Trainyard converts ", absl::StrJoin(allowed, ", "), " here")));
  return std::optional<Call>();
}

absl::Status Converter::Refuse(const Bound& b, const std::string& why) {
  const std::string message = absl::StrCat(b.where.ToString(), ": ", b.key, " = ", Quoted(b.value), ": ", why);
  if (!options_.allow_unmapped) {
    return absl::InvalidArgumentError(absl::StrCat(message, " (--allow-unmapped converts the rest without it)"));
  }
  out_->warnings.push_back(message);
  return absl::OkStatus();
}

absl::Status Converter::Expect(const Call& call, const std::string& arg, const std::function<bool(const GinValue&)>& ok,
                               const std::string& why) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (b && !ok(b->value)) return Refuse(*b, why);
  return absl::OkStatus();
}

absl::Status Converter::Note(const Call& call, const std::string& arg, const std::string& why) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (b) out_->notes.push_back(absl::StrCat(b->where.ToString(), ": ", b->key, " = ", Quoted(b->value), ": ", why));
  return absl::OkStatus();
}

bool IsNone(const GinValue& v) { return v.is_none(); }
bool IsFalse(const GinValue& v) { return v.kind == GinValue::Kind::kBool && !v.b; }
bool IsTrue(const GinValue& v) { return v.kind == GinValue::Kind::kBool && v.b; }
bool IsZero(const GinValue& v) { return v.is_number() && v.number() == 0; }
bool IsEmpty(const GinValue& v) {
  return v.is_none() ||
         ((v.kind == GinValue::Kind::kList || v.kind == GinValue::Kind::kTuple || v.kind == GinValue::Kind::kDict) &&
          v.items.empty());
}
std::function<bool(const GinValue&)> RefersTo(const std::string& name) {
  return [name](const GinValue& v) { return v.kind == GinValue::Kind::kReference && GinSelectorMatches(v.s, name); };
}

absl::Status LocalPath(const std::string& path, const Bound& b) {
  if (absl::StartsWith(path, "gs://") || absl::StrContains(path, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(b.where.ToString(), ": ", b.key, " = '", path,
                                                   "': Trainyard reads local files only; copy it (e.g. gsutil cp -r ",
                                                   path, " ./local_copy) and bind the copy: --gin-binding \"", b.key,
                                                   " = './local_copy'\""));
  }
  return absl::OkStatus();
}

// A job name from the run's folder: its last component in [A-Za-z0-9_.-].
std::string NameFromFolder(std::string folder) {
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  std::string name = folder.substr(folder.rfind('/') + 1);
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != '-') ch = '-';
  }
  while (!name.empty() && !std::isalnum(static_cast<unsigned char>(name[0]))) name.erase(0, 1);
  if (name.size() > 128) name.resize(128);
  return name.empty() ? "t5x-run" : name;
}

absl::Status Converter::Run() {
  const Call train{kTrain, ""};
  if (!config_->Mentions("", kTrain)) {
    const bool other = config_->Mentions("", "__main__.evaluate") || config_->Mentions("", "__main__.infer");
    return absl::InvalidArgumentError(
        other ? "the configuration binds eval.py's `evaluate` or infer.py's `infer`: only train.py's `train` "
                "configurations are converted (run an EVALUATION or INFERENCE job of the converted training spec)"
              : "the configuration binds nothing of train.py's `train` (e.g. train.total_steps): not a T5X "
                "training run");
  }
  called_.push_back(train);
  spec_->set_kind(TRAIN);
  TY_RETURN_IF_ERROR(MapTrainScript(train));
  TY_RETURN_IF_ERROR(MapTrainScriptSettings(train));
  TY_RETURN_IF_ERROR(MapActions(train));
  for (const TaskDefinition& t : options_.definitions.task_definitions()) {
    TaskDefinition* copy = spec_->add_task_definitions();
    *copy = t;
    if (copy->vocabulary().empty()) copy->set_vocabulary(vocabulary_);
    if (!copy->has_extra_ids() && extra_ids_) copy->set_extra_ids(static_cast<int32_t>(*extra_ids_));
  }
  out_->vocabulary = vocabulary_;
  for (const MixtureDefinition& m : options_.definitions.mixture_definitions()) *spec_->add_mixture_definitions() = m;
  return CheckUnused();
}

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
                            "Trainyard reads the task's own files and preprocesses them as it trains, not a seqio "
                            "cache: bind USE_CACHED_TASKS = False"));
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
  TY_ASSIGN_OR_RETURN(std::optional<std::string> task, String(data, "mixture_or_task_name"));
  if (!task) return absl::InvalidArgumentError(absl::StrCat(data.Shown(), ".mixture_or_task_name is not bound"));
  spec_->mutable_eval()->add_tasks(*task);
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
                            "Trainyard reads the task's own files, not a seqio cache: bind USE_CACHED_TASKS = False"));
  TY_RETURN_IF_ERROR(Expect(data, "module", IsNone, "a Python module cannot register tasks in Trainyard"));
  TY_RETURN_IF_ERROR(Note(data, "seed", "the evaluation reads the split in order: no shuffling seed"));
  TY_RETURN_IF_ERROR(Note(data, "use_custom_packing_ops", "evaluation is unpacked"));
  TY_RETURN_IF_ERROR(Note(data, "use_memory_cache", "tf.data's cache: Trainyard reads its files as it goes"));
  TY_RETURN_IF_ERROR(Note(data, "trim_output_features", "Trainyard always cuts features to their lengths"));
  return absl::OkStatus();
}

absl::Status Converter::MapModel(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Call> module, Callee(model, "module", {kTransformer}, true));
  if (!module) return absl::InvalidArgumentError(absl::StrCat(model.Shown(), ".module is not bound"));
  TY_ASSIGN_OR_RETURN(std::optional<Call> config, Callee(*module, "config", {kT5Config}, true));
  if (!config) return absl::InvalidArgumentError(absl::StrCat(module->Shown(), ".config is not bound"));
  TY_RETURN_IF_ERROR(MapNetwork(*config));
  TY_RETURN_IF_ERROR(MapVocabulary(model));
  TY_RETURN_IF_ERROR(MapOptimizer(model));
  TY_RETURN_IF_ERROR(MapDecoding(model));
  LossConfig* loss = spec_->mutable_loss();
  TY_ASSIGN_OR_RETURN(std::optional<double> z, Float(model, "z_loss", 0, 1));
  loss->set_z_loss(static_cast<float>(z.value_or(0.0)));  // EncoderDecoderModel's default
  TY_ASSIGN_OR_RETURN(std::optional<double> smoothing, Float(model, "label_smoothing", 0, 0.999));
  loss->set_label_smoothing(static_cast<float>(smoothing.value_or(0.0)));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> factor, Get(model, "loss_normalizing_factor"));
  if (!factor || factor->value.is_none()) {
    loss->set_normalization(LossConfig::NO_NORMALIZATION);  // T5X: the summed loss
  } else if (factor->value.is_number() && factor->value.number() > 0) {
    loss->set_normalization(LossConfig::CONSTANT);
    loss->set_normalizing_constant(static_cast<float>(factor->value.number()));
  } else if (factor->value.kind == GinValue::Kind::kString && factor->value.s == "NUM_REAL_TARGET_TOKENS") {
    loss->set_normalization(LossConfig::NUM_TARGET_TOKENS);
  } else {
    TY_RETURN_IF_ERROR(Refuse(*factor,
                              "Trainyard normalises by None (the sum), a positive constant or "
                              "'NUM_REAL_TARGET_TOKENS'"));
  }
  TY_RETURN_IF_ERROR(Expect(model, "feature_converter_cls", RefersTo("seqio.EncDecFeatureConverter"),
                            "Trainyard's feature converter is seqio's EncDecFeatureConverter"));
  return absl::OkStatus();
}

absl::Status Converter::MapNetwork(const Call& c) {
  ModelConfig* m = spec_->mutable_model()->mutable_config();
  struct IntField {
    const char* arg;
    void (ModelConfig::*set)(int32_t);
    int32_t t5x_default;
  };
  for (const IntField& f :
       {IntField{"vocab_size", &ModelConfig::set_vocab_size, 0}, IntField{"emb_dim", &ModelConfig::set_d_model, 512},
        IntField{"num_heads", &ModelConfig::set_num_heads, 8},
        IntField{"num_encoder_layers", &ModelConfig::set_num_encoder_layers, 6},
        IntField{"num_decoder_layers", &ModelConfig::set_num_decoder_layers, 6},
        IntField{"head_dim", &ModelConfig::set_d_kv, 64}, IntField{"mlp_dim", &ModelConfig::set_d_ff, 2048}}) {
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> v, Int(c, f.arg, 1, 1 << 22));
    if (!v && f.t5x_default == 0) {
      return absl::InvalidArgumentError(absl::StrCat(c.Shown(), ".", f.arg, " is not bound: T5Config requires it"));
    }
    (m->*f.set)(static_cast<int32_t>(v.value_or(f.t5x_default)));
  }
  TY_ASSIGN_OR_RETURN(std::optional<Bound> act, Get(c, "mlp_activations"));
  const std::string acts = act ? act->value.ToString() : "('relu',)";
  if (acts == "('relu',)" || acts == "['relu']") {
    m->set_feed_forward(ModelConfig::RELU);
  } else if (acts == "('gelu', 'linear')" || acts == "['gelu', 'linear']") {
    m->set_feed_forward(ModelConfig::GATED_GELU);
  } else {
    TY_RETURN_IF_ERROR(
        Refuse(*act, "Trainyard's feed-forward layers are ('relu',) (T5) and ('gelu', 'linear') (T5.1.1)"));
  }
  TY_ASSIGN_OR_RETURN(std::optional<double> dropout, Float(c, "dropout_rate", 0, 0.999));
  m->set_dropout_rate(static_cast<float>(dropout.value_or(0.1)));
  TY_ASSIGN_OR_RETURN(std::optional<bool> tie, Bool(c, "logits_via_embedding"));
  m->set_tie_embeddings(tie.value_or(false));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> dtype, Get(c, "dtype"));
  if (!dtype || dtype->value.ToString() == "'float32'" || RefersTo("jnp.float32")(dtype->value)) {
    spec_->set_dtype(FLOAT32);
  } else if (dtype->value.ToString() == "'bfloat16'" || RefersTo("jnp.bfloat16")(dtype->value)) {
    spec_->set_dtype(BFLOAT16);
  } else {
    TY_RETURN_IF_ERROR(Refuse(*dtype, "Trainyard computes in 'float32' or 'bfloat16'"));
  }
  return Expect(c, "float32_attention_logits", IsFalse,
                "Trainyard computes attention logits in the activations' dtype");
}

absl::Status Converter::MapVocabulary(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> in, Get(model, "input_vocabulary"));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> out, Get(model, "output_vocabulary"));
  if (!in || !out) return absl::InvalidArgumentError(absl::StrCat(model.Shown(), ": both vocabularies must be bound"));
  if (in->value != out->value) {
    TY_RETURN_IF_ERROR(Refuse(*out, absl::StrCat("Trainyard's models share one vocabulary; the input's is ",
                                                 Quoted(in->value), " (", in->where.ToString(), ")")));
  }
  TY_ASSIGN_OR_RETURN(std::optional<Call> vocab, CalleeOf(*in, {kVocabulary}, true));
  if (!vocab) return absl::OkStatus();
  TY_ASSIGN_OR_RETURN(std::optional<Bound> file, Get(*vocab, "sentencepiece_model_file"));
  if (!file || file->value.kind != GinValue::Kind::kString) {
    if (file) return TypeError(*file, "a SentencePiece model's path");
    return absl::InvalidArgumentError(absl::StrCat(vocab->Shown(), ".sentencepiece_model_file is not bound"));
  }
  TY_RETURN_IF_ERROR(LocalPath(file->value.s, *file));
  vocabulary_ = file->value.s;
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> extra, Int(*vocab, "extra_ids", 0, 100000));
  extra_ids_ = extra;
  return Expect(*vocab, "normalizer_spec_overrides", IsNone, "Trainyard reads the model's own normalizer");
}

absl::Status Converter::MapOptimizer(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Call> opt, Callee(model, "optimizer_def", {kAdafactor, kAdamW, kChain}, true));
  if (!opt) return absl::InvalidArgumentError(absl::StrCat(model.Shown(), ".optimizer_def is not bound"));
  if (opt->name == kAdafactor) return MapAdafactor(*opt);
  if (opt->name == kAdamW) return MapAdamW(*opt);
  // optimizers.chain([optax.clip_by_global_norm(N), optimizers.adamw()...])
  TY_ASSIGN_OR_RETURN(std::optional<Bound> list, Get(*opt, "transformations"));
  if (!list || list->value.kind != GinValue::Kind::kList) {
    return absl::InvalidArgumentError(absl::StrCat(opt->Shown(), ".transformations: expected a list"));
  }
  bool optimizer = false;
  for (const GinValue& item : list->value.items) {
    Bound b{item, list->where, list->key};
    TY_ASSIGN_OR_RETURN(std::optional<Call> step, CalleeOf(b, {kClipByGlobalNorm, "optax.adamw"}, true));
    if (!step) continue;
    if (step->name == kClipByGlobalNorm) {
      TY_ASSIGN_OR_RETURN(std::optional<double> norm, Float(*step, "max_norm", 1e-9, 1e9));
      if (!norm) return absl::InvalidArgumentError(absl::StrCat(step->Shown(), ".max_norm is not bound"));
      spec_->mutable_optimizer()->set_max_grad_norm(static_cast<float>(*norm));
    } else {
      if (optimizer) return Refuse(b, "one optimizer per chain");
      optimizer = true;
      TY_RETURN_IF_ERROR(MapAdamW(*step));
    }
  }
  if (!optimizer) return Refuse(*list, "the chain holds no optimizer Trainyard converts (optax.adamw)");
  return absl::OkStatus();
}

absl::Status Converter::MapAdafactor(const Call& c) {
  Adafactor* a = spec_->mutable_optimizer()->mutable_adafactor();
  TY_ASSIGN_OR_RETURN(std::optional<double> decay, Float(c, "decay_rate", 0, 1));
  a->set_decay_rate(static_cast<float>(decay.value_or(0.8)));
  TY_ASSIGN_OR_RETURN(std::optional<double> clip, Float(c, "clipping_threshold", 0, 1e9));
  a->set_clipping_threshold(static_cast<float>(clip.value_or(1.0)));
  TY_ASSIGN_OR_RETURN(std::optional<bool> scale, Bool(c, "multiply_by_parameter_scale"));
  a->set_multiply_by_parameter_scale(scale.value_or(true));
  TY_ASSIGN_OR_RETURN(std::optional<double> eps1, Float(c, "epsilon1", 0, 1));
  a->set_epsilon1(static_cast<float>(eps1.value_or(1e-30)));
  TY_ASSIGN_OR_RETURN(std::optional<double> eps2, Float(c, "epsilon2", 0, 1));
  a->set_epsilon2(static_cast<float>(eps2.value_or(1e-3)));
  TY_ASSIGN_OR_RETURN(std::optional<double> beta1, Float(c, "beta1", 0, 1));
  if (beta1) a->set_beta1(static_cast<float>(*beta1));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> min_dim, Int(c, "min_dim_size_to_factor", 0, 1 << 30));
  a->set_min_dim_size_to_factor(static_cast<int32_t>(min_dim.value_or(128)));
  TY_ASSIGN_OR_RETURN(std::optional<double> wd, Float(c, "weight_decay_rate", 0, 1));
  a->set_weight_decay_rate(static_cast<float>(wd.value_or(0.0)));
  TY_RETURN_IF_ERROR(Expect(c, "step_offset", IsZero, "Trainyard's Adafactor counts steps from 0"));
  TY_RETURN_IF_ERROR(Expect(c, "factored", IsTrue, "Trainyard's Adafactor factors every matrix"));
  TY_RETURN_IF_ERROR(Expect(c, "weight_decay_rate_lr_exponent", IsNone, "not in Trainyard's Adafactor"));
  TY_RETURN_IF_ERROR(Expect(c, "factor_map", IsNone, "Trainyard factors by the matrices' own rows and columns"));
  TY_RETURN_IF_ERROR(Expect(
      c, "dtype_momentum", [](const GinValue& v) { return v.ToString() == "'float32'"; },
      "Trainyard keeps the momentum in float32"));
  return Note(c, "logical_factor_rules", "names the axes for partitioning; Trainyard factors rows and columns");
}

absl::Status Converter::MapAdamW(const Call& c) {
  AdamW* a = spec_->mutable_optimizer()->mutable_adamw();
  TY_ASSIGN_OR_RETURN(std::optional<double> b1, Float(c, "b1", 0, 1));
  a->set_beta1(static_cast<float>(b1.value_or(0.9)));
  TY_ASSIGN_OR_RETURN(std::optional<double> b2, Float(c, "b2", 0, 1));
  a->set_beta2(static_cast<float>(b2.value_or(0.999)));
  TY_ASSIGN_OR_RETURN(std::optional<double> eps, Float(c, "eps", 0, 1));
  a->set_epsilon(static_cast<float>(eps.value_or(1e-8)));
  TY_ASSIGN_OR_RETURN(std::optional<double> wd, Float(c, "weight_decay", 0, 1));
  a->set_weight_decay(static_cast<float>(wd.value_or(1e-4)));  // optax.adamw's default
  return Expect(c, "learning_rate", IsNone,
                "the learning rate comes from trainer.Trainer.learning_rate_fn (T5X wraps optax optimizers so)");
}

absl::Status Converter::MapDecoding(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> fn, Get(model, "decode_fn"));
  InferenceConfig* inference = spec_->mutable_inference();
  if (!fn || RefersTo(kBeamSearch)(fn->value)) {
    inference->set_method(InferenceConfig::BEAM);  // EncoderDecoderModel's default
    Call beam{kBeamSearch, ""};
    called_.push_back(beam);
    TY_ASSIGN_OR_RETURN(std::optional<double> alpha, Float(beam, "alpha", 0, 100));
    inference->set_alpha(static_cast<float>(alpha.value_or(0.6)));
    return absl::OkStatus();
  }
  if (!RefersTo(kTemperatureSample)(fn->value)) {
    return Refuse(*fn, "Trainyard decodes with decoding.beam_search or decoding.temperature_sample");
  }
  inference->set_method(InferenceConfig::SAMPLE);
  Call sample{kTemperatureSample, ""};
  called_.push_back(sample);
  TY_ASSIGN_OR_RETURN(std::optional<double> temperature, Float(sample, "temperature", 0, 1e6));
  inference->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> topk, Int(sample, "topk", 0, 1 << 30));
  inference->set_top_k(static_cast<int32_t>(topk.value_or(1)));
  TY_ASSIGN_OR_RETURN(std::optional<double> topp, Float(sample, "topp", 0, 1));
  inference->set_top_p(static_cast<float>(topp.value_or(0.0)));
  return absl::OkStatus();
}

absl::Status Converter::MapTrainer(const Call& trainer) {
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> micro, Int(trainer, "num_microbatches", 1, 1 << 20));
  spec_->set_num_microbatches(static_cast<int32_t>(micro.value_or(1)));
  TY_ASSIGN_OR_RETURN(std::optional<Call> schedule, Callee(trainer, "learning_rate_fn", {kSchedule}, true));
  if (!schedule) return absl::InvalidArgumentError(absl::StrCat(trainer.Shown(), ".learning_rate_fn is not bound"));
  TY_RETURN_IF_ERROR(MapSchedule(*schedule));
  TY_ASSIGN_OR_RETURN(std::optional<Call> weights, Callee(trainer, "weight_metrics_computer", {kWeightMetrics}, true));
  if (weights) spec_->mutable_summary()->set_weight_metrics(true);
  return absl::OkStatus();
}

absl::Status Converter::MapSchedule(const Call& c) {
  LearningRateSchedule* lr = spec_->mutable_learning_rate();
  // Every field from T5X's create_learning_rate_scheduler's own defaults.
  TY_ASSIGN_OR_RETURN(std::optional<std::string> factors, String(c, "factors"));
  lr->set_factors(factors.value_or("constant * linear_warmup * rsqrt_decay"));
  TY_ASSIGN_OR_RETURN(std::optional<double> base, Float(c, "base_learning_rate", 0, 1e6));
  lr->set_base_learning_rate(static_cast<float>(base.value_or(0.5)));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> warmup, Int(c, "warmup_steps", 0, int64_t{1} << 40));
  lr->set_warmup_steps(warmup.value_or(1000));
  TY_ASSIGN_OR_RETURN(std::optional<double> decay, Float(c, "decay_factor", 0, 1e6));
  lr->set_decay_factor(static_cast<float>(decay.value_or(0.5)));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> per_decay, Int(c, "steps_per_decay", 0, int64_t{1} << 40));
  lr->set_steps_per_decay(per_decay.value_or(20000));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> cycle, Int(c, "steps_per_cycle", 0, int64_t{1} << 40));
  lr->set_steps_per_cycle(cycle.value_or(100000));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> offset, Int(c, "step_offset", 0, int64_t{1} << 40));
  lr->set_step_offset(offset.value_or(0));
  TY_ASSIGN_OR_RETURN(std::optional<double> floor, Float(c, "min_learning_rate", 0, 1e6));
  lr->set_min_learning_rate(static_cast<float>(floor.value_or(1e-8)));
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

// Bindings nobody read: an error (or warning) when their configurable was
// called (Trainyard has no counterpart for the argument), a note when it
// never was (T5X ignores it too).
absl::Status Converter::CheckUnused() {
  for (const GinConfig::Binding& b : config_->bindings()) {
    if (b.used || b.overridden || b.statement.is_macro()) continue;
    const GinStatement& st = b.statement;
    const std::string key = (st.scope.empty() ? "" : st.scope + "/") + st.selector + "." + st.arg;
    bool called = false;
    for (const Call& c : called_) {
      if (GinSelectorMatches(b.module_selector, c.name) && (st.scope.empty() || st.scope == c.scope)) called = true;
    }
    if (!called) {
      out_->notes.push_back(absl::StrCat(st.location.ToString(), ": ", key,
                                         ": not used (train.py never calls it here; T5X ignores it too)"));
      continue;
    }
    TY_RETURN_IF_ERROR(Refuse(Bound{st.value, st.location, key}, "Trainyard has no counterpart for this argument"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GinConversion> JobSpecFromGin(GinConfig* config, const GinConversionOptions& options) {
  GinConversion out;
  Converter converter(config, options, &out);
  TY_RETURN_IF_ERROR(converter.Run());
  return out;
}

}  // namespace trainyard
