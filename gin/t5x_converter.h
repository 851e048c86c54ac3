// The converter behind JobSpecFromGin (gin/t5x_job.h), shared by its
// sources: t5x_converter.cc (reading bindings, the walk from `train`, the
// unused bindings), t5x_job.cc (the training script, data, checkpoints,
// partitioner, actions) and t5x_model.cc (model, network, vocabulary,
// optimizer, decoding, trainer and schedule). Internal to //gin:t5x_job.
//
// Thread-safety: not thread-safe (reads mark the configuration's bindings).
#ifndef TRAINYARD_GIN_T5X_CONVERTER_H_
#define TRAINYARD_GIN_T5X_CONVERTER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gin/gin_config.h"
#include "gin/t5x_job.h"
#include "proto/job.pb.h"

namespace trainyard {
namespace gin_internal {

// T5X's configurables by the end of their module paths.
inline constexpr char kTrain[] = "__main__.train";
inline constexpr char kDatasetConfig[] = "utils.DatasetConfig";
inline constexpr char kEncoderDecoderModel[] = "models.EncoderDecoderModel";
inline constexpr char kTransformer[] = "network.Transformer";
inline constexpr char kT5Config[] = "network.T5Config";
inline constexpr char kVocabulary[] = "SentencePieceVocabulary";  // seqio. or seqio.vocabularies.
inline constexpr char kAdafactor[] = "adafactor.Adafactor";
inline constexpr char kAdamW[] = "optimizers.adamw";
inline constexpr char kChain[] = "optimizers.chain";
inline constexpr char kClipByGlobalNorm[] = "optax.clip_by_global_norm";
inline constexpr char kTrainer[] = "trainer.Trainer";
inline constexpr char kSchedule[] = "utils.create_learning_rate_scheduler";
inline constexpr char kWeightMetrics[] = "trainer.WeightMetricsComputer";
inline constexpr char kCheckpointConfig[] = "utils.CheckpointConfig";
inline constexpr char kSaveConfig[] = "utils.SaveCheckpointConfig";
inline constexpr char kRestoreConfig[] = "utils.RestoreCheckpointConfig";
inline constexpr char kPartitioner[] = "partitioning.PjitPartitioner";
inline constexpr char kBeamSearch[] = "decoding.beam_search";
inline constexpr char kTemperatureSample[] = "decoding.temperature_sample";
inline constexpr char kEarlyStopping[] = "trainer.EarlyStoppingAction";
inline constexpr char kTerminateOnNan[] = "trainer.TerminateOnNanAction";

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
  // A task name a DatasetConfig binds: one of T5's well-known tasks
  // (gin/t5_tasks.h) that the given definitions do not define becomes a
  // definition over TFDS; one whose preprocessors Trainyard lacks is refused.
  absl::Status ResolveT5Task(const Bound& task);
  // Definitions copied into the spec, with the model's vocabulary and extra
  // ids when they name none.
  void AddDefinition(const TaskDefinition& def);

  GinConfig* config_;
  const GinConversionOptions& options_;
  GinConversion* out_;
  JobSpec* spec_;
  std::vector<Call> called_;
  std::string vocabulary_;  // the model's, "" when unbound
  std::optional<int64_t> extra_ids_;
  std::vector<TaskDefinition> t5_tasks_;  // from ResolveT5Task, in order
};

// Python's repr of a value, as messages quote it.
std::string Quoted(const GinValue& v);
// kInvalidArgument "FILE:LINE: key = value: expected `want`".
absl::Status TypeError(const Bound& b, absl::string_view want);
bool IsNone(const GinValue& v);
bool IsFalse(const GinValue& v);
bool IsTrue(const GinValue& v);
bool IsZero(const GinValue& v);
bool IsEmpty(const GinValue& v);  // None or an empty container
// A reference (@NAME or @NAME()) to `name`.
std::function<bool(const GinValue&)> RefersTo(const std::string& name);
// kInvalidArgument for a remote path (gs://...), saying how to use a local copy.
absl::Status LocalPath(const std::string& path, const Bound& b);
// A job name from the run's folder: its last component in [A-Za-z0-9_.-].
std::string NameFromFolder(std::string folder);

}  // namespace gin_internal
}  // namespace trainyard

#endif  // TRAINYARD_GIN_T5X_CONVERTER_H_
