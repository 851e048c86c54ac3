// Training checkpoints: everything a job needs to continue exactly where it
// stopped, as a checkpoint directory (checkpoint/checkpoint_dir.h: written
// to a temporary sibling, manifest with SHA-256 of every file, fsynced,
// renamed; a directory without a good manifest is not a checkpoint):
//
//   OUTPUT_DIR/checkpoint_<step>/
//     params.safetensors     the parameters, in the save dtype
//     optimizer.safetensors  the optimizer state, float32
//     metadata.json          format "trainyard.checkpoint", version 2, step,
//                            model_config, world_size, data_states (each
//                            rank's iterator position), job (the spec),
//                            save_dtype, source
//     MANIFEST.json
//
// A model-only checkpoint (version 1: `trainyard convert`, older jobs) has
// no optimizer state or data positions; restoring one starts a fresh
// optimizer.
#ifndef TRAINYARD_TRAINER_TRAIN_CHECKPOINT_H_
#define TRAINYARD_TRAINER_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "model/t5.h"
#include "model/weights.h"
#include "trainer/optimizer.h"

namespace trainyard {

// The state to write, copied off the training buffers so that training can
// go on while it is written.
struct TrainSnapshot {
  int64_t step = 0;
  ModelConfig config;
  std::vector<std::pair<std::string, torch::Tensor>> params;  // CPU copies
  std::map<std::string, torch::Tensor> optimizer;             // CPU copies
  int world_size = 1;
  std::vector<std::string> data_states;  // by rank
  std::string job_json;                  // the job spec
  std::string source;
};

// `reuse`: a snapshot whose tensors are written over when their shapes
// match (no fresh allocation, no page faults: the stall is a memcpy).
TrainSnapshot MakeSnapshot(T5Impl& model, const Optimizer& optimizer, int64_t step, int world_size,
                           std::vector<std::string> data_states, std::string job_json, std::string source,
                           TrainSnapshot reuse = {});
// The same with the optimizer's state given (Optimizer::GatherState, for
// one sharded over the ranks). `state_is_a_copy`: the state's CPU tensors
// are the caller's to give (not the optimizer's live ones), and are taken
// as they are instead of copied.
TrainSnapshot MakeSnapshot(T5Impl& model, const std::map<std::string, torch::Tensor>& optimizer_state, int64_t step,
                           int world_size, std::vector<std::string> data_states, std::string job_json,
                           std::string source, TrainSnapshot reuse = {}, bool state_is_a_copy = false);

// Writes `dir` (which must not exist). `save_dtype`: kFloat or kBFloat16
// for the parameters (the optimizer state is always float32).
absl::Status WriteTrainCheckpoint(const std::string& dir, const TrainSnapshot& snapshot, torch::ScalarType save_dtype);

struct TrainCheckpoint {
  std::string dir;
  int version = 0;
  int64_t step = 0;
  ModelConfig config;
  TensorMap params;
  std::map<std::string, torch::Tensor> optimizer;  // empty for a model-only checkpoint
  int world_size = 0;                              // 0: unknown (model-only)
  std::vector<std::string> data_states;
};

// Verifies the manifest (kNotFound without one, kDataLoss naming a damaged
// file), then reads everything.
absl::StatusOr<TrainCheckpoint> ReadTrainCheckpoint(const std::string& dir);

// The checkpoint_<step> directories directly under `dir`, by step (not
// verified).
std::map<int64_t, std::string> ListCheckpoints(const std::string& dir);

// Deletes the temporary directories (checkpoint_<step>.tmp-<pid>) that a
// save killed before its rename left under `dir`; returns their names. They
// are never read as checkpoints; this only reclaims their space.
std::vector<std::string> RemoveUnfinishedCheckpoints(const std::string& dir);

// A checkpoint passed over because it does not read back whole.
struct SkippedCheckpoint {
  std::string dir;
  std::string why;  // the status message: which file, what is wrong
};

// The newest checkpoint under `dir` whose manifest verifies; those that do
// not are skipped, each with its reason in `skipped`. kNotFound if none.
absl::StatusOr<std::string> LatestGoodCheckpoint(const std::string& dir, std::vector<SkippedCheckpoint>* skipped);

// Moves a damaged checkpoint directory aside, to DIR.damaged-<unix seconds>
// (kept for inspection; never listed, restored or deleted by retention), so
// that its step can be saved again. Returns the new path.
absl::StatusOr<std::string> SetAsideDamagedCheckpoint(const std::string& dir);

// Keep-best (T5X's SaveBestCheckpointer): the metric of each evaluated
// checkpoint is recorded in DIR/checkpoint_metrics.json ({"<step>": value},
// replaced atomically).
absl::Status RecordCheckpointMetric(const std::string& dir, int64_t step, double value);
// Keeps the newest `keep` checkpoints and also the `keep_best` best by the
// recorded metric (lowest, or highest when `maximize`); deletes the others.
// keep 0 keeps everything.
void ApplyRetention(const std::string& dir, int keep, int keep_best, bool maximize);

// Writes checkpoints on a background thread, at most one at a time: Save
// waits for the previous write first. A failed write never replaces a good
// checkpoint (the directory is only renamed into place when complete); its
// error is returned by the next Save or Wait.
class AsyncCheckpointer {
 public:
  AsyncCheckpointer() = default;
  ~AsyncCheckpointer();  // waits for the write in flight

  // Starts writing `snapshot` to `dir`; returns how long it waited for the
  // previous write, or that write's error. `after` runs on the writer thread
  // once the write succeeded (e.g. deleting old checkpoints).
  absl::StatusOr<double> Save(std::string dir, TrainSnapshot snapshot, torch::ScalarType save_dtype,
                              std::function<void()> after = nullptr);
  // Waits for the write in flight; its status.
  absl::Status Wait();
  // The buffers of the last finished write, for MakeSnapshot to reuse
  // (empty if none or a write is in flight).
  TrainSnapshot TakeBuffers();
  // The newest checkpoint written completely ("" if none yet), and how long
  // that write took.
  std::string last_written() const;
  double last_write_seconds() const;

 private:
  mutable Mutex mu_;
  std::thread writer_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // the last finished write's
  std::string last_written_ ABSL_GUARDED_BY(mu_);
  double last_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  TrainSnapshot buffers_ ABSL_GUARDED_BY(mu_);  // the finished write's snapshot
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_TRAIN_CHECKPOINT_H_
