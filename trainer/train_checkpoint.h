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
//                            save_dtype, source, vocabulary; with
//                            data_parallel.reproducible,
//                            exact_sum_exponents (each parameter's scale
//                            for the next step's exact gradient sum)
//     vocabulary.model       the vocabulary the model's ids are in (when
//                            the job knows it: checkpoint_vocabulary.h)
//     MANIFEST.json
//
// A job whose optimizer is sharded over its W ranks (data_parallel.sharding
// OPTIMIZER or GRADIENTS) writes version 3: each rank writes its own slots
// in parallel, with no gather onto one rank,
//     optimizer-<r>-of-<W>.safetensors   (5 digits each, r = 0 .. W-1)
// in place of optimizer.safetensors, and metadata.json has
// "optimizer_shards": W. All ranks write into one temporary sibling named by
// a token of that save; rank r > 0 marks its file complete (fsynced) with
// an empty "<file>.done"; rank 0 writes the parameters and its own shard,
// waits for every mark (at most 60 s plus 4x its own write time), removes
// the marks and commits: the manifest covers every shard, so a checkpoint
// missing one is never read. Reading one gives the whole state, whatever
// the world size or sharding of the reader.
//
// With the parameters sharded too (data_parallel.sharding PARAMETERS: each
// rank holds only its own), version 4: as version 3, and each rank also
// writes its own parameters, in the save dtype,
//     params-<r>-of-<W>.safetensors      (model/weights.h)
// in place of params.safetensors, before its optimizer file (its mark
// covers both); metadata.json has "param_shards": W. Nothing is gathered
// onto one rank to save; reading one gives every parameter.
//
// A model-only checkpoint (version 1: `trainyard convert`, older jobs) has
// no optimizer state or data positions; restoring one starts a fresh
// optimizer.
#ifndef TRAINYARD_TRAINER_TRAIN_CHECKPOINT_H_
#define TRAINYARD_TRAINER_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
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
  // The vocabulary the model's ids are in (its SentencePiece model's bytes;
  // empty: none) and its extra ids: vocabulary.model in the checkpoint
  // (checkpoint/checkpoint_vocabulary.h), written by the committing rank.
  std::string vocabulary_model;
  int vocabulary_extra_ids = 0;
  // Trainer::ExactSumExponents (empty: none): the scales the next step's
  // exact sum starts from, so that a resumed run sums at the same scales as
  // an uninterrupted one.
  std::map<std::string, int> exact_sum_exponents;
  // Version 3 (above): this is rank `shard`'s part of a checkpoint written
  // by `num_shards` ranks; `optimizer` holds this rank's slots, and only
  // rank 0's has the parameters. `token` names the temporary directory of
  // this save, the same on every rank. num_shards 0: one writer (version 2).
  int shard = 0;
  int num_shards = 0;
  std::string token;
  // Version 4: `params` holds only this rank's parameters, written to its
  // own file (num_shards of them; set to num_shards, or 0).
  int param_shards = 0;
  // Rank 0: how long to wait for the other ranks' files, beyond 4x its
  // own write time.
  double shard_wait_seconds = 60;
  // The tensors are the live training state's, not copies (a save the
  // caller waits for, during which nothing trains): no second copy of the
  // state at the checkpoint, and never kept for reuse.
  bool borrowed = false;
};

// The name of rank `shard`'s optimizer file in a version 3 checkpoint.
std::string OptimizerShardFile(int shard, int num_shards);
// A snapshot of a version 3 checkpoint without the parameters (ranks
// other than 0): its optimizer state, copied unless borrowed. The caller
// sets shard, num_shards and token.
TrainSnapshot MakeOptimizerShardSnapshot(const std::map<std::string, torch::Tensor>& optimizer_state, int64_t step,
                                         TrainSnapshot reuse = {}, bool borrow = false);

// `reuse`: a snapshot whose tensors are written over when their shapes
// match (no fresh allocation, no page faults: the stall is a memcpy).
// `borrow`: host tensors are taken as they are, not copied (the caller
// waits for the write and changes nothing meanwhile); device tensors are
// still copied to the host.
TrainSnapshot MakeSnapshot(T5Impl& model, const Optimizer& optimizer, int64_t step, int world_size,
                           std::vector<std::string> data_states, std::string job_json, std::string source,
                           TrainSnapshot reuse = {}, bool borrow = false);
// The same with the optimizer's state given (rank 0's shard of a sharded
// optimizer's, Optimizer::State, or a whole state), and only the
// parameters `keep_param` accepts (all when it is empty: a PARAMETERS rank
// passes its own, the others' memory being released).
TrainSnapshot MakeSnapshot(T5Impl& model, const std::map<std::string, torch::Tensor>& optimizer_state, int64_t step,
                           int world_size, std::vector<std::string> data_states, std::string job_json,
                           std::string source, TrainSnapshot reuse = {}, bool borrow = false,
                           const std::function<bool(const std::string&)>& keep_param = nullptr);

// Writes `dir` (which must not exist). `save_dtype`: kFloat or kBFloat16
// for the parameters (the optimizer state is always float32). A part of a
// version 3 checkpoint (num_shards > 0): this rank's files; rank 0's call
// commits once every rank's are there (kDeadlineExceeded naming the ranks
// missing, and nothing committed, if they do not come).
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
  int optimizer_shards = 0;                        // version 3: the files the state came from
  int param_shards = 0;                            // version 4: the files the parameters came from
  std::map<std::string, int> exact_sum_exponents;  // TrainSnapshot's
};

// Which optimizer slots a reader wants (by name); empty: all of them.
using SlotFilter = std::function<bool(const std::string& slot)>;
// Which parameters a reader wants (by name); empty: all of them.
using ParamFilter = std::function<bool(const std::string& name)>;

// Verifies the manifest (kNotFound without one, kDataLoss naming a damaged
// file), then reads the parameters and the optimizer slots `keep_slot`
// accepts ("step" is always there). A rank of a sharded optimizer passes its
// own slots, so a restore holds its shard of the state rather than the
// whole of it. `keep_param` likewise for the parameters (a rank of
// PARAMETERS sharding reads its own). Every name is still checked: one
// found in two shard files is kDataLoss whether it is read or not.
absl::StatusOr<TrainCheckpoint> ReadTrainCheckpoint(const std::string& dir, const SlotFilter& keep_slot = nullptr,
                                                    const ParamFilter& keep_param = nullptr);

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

// A checkpoint_<step> directory and its step.
struct NumberedCheckpoint {
  int64_t step = 0;
  std::string dir;
};

// The next checkpoint of a sweep over every checkpoint (restore { mode: ALL
// }): the one under `dir` of the smallest step above `after_step` (steps
// compared as numbers: 100 before 1000) whose manifest verifies. A save in
// progress is never listed (its directory gets its name when complete);
// those above `after_step` that do not verify (damaged; no manifest) are
// skipped, each with its reason in `skipped`. nullopt when none is left.
std::optional<NumberedCheckpoint> NextGoodCheckpoint(const std::string& dir, int64_t after_step,
                                                     std::vector<SkippedCheckpoint>* skipped);

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
  // Why the last finished write failed ("<dir>: <error>"), or "" once a
  // later one succeeded. Unlike Wait's status it is not consumed: a job
  // reports it on every chunk until a write succeeds again.
  std::string last_failure() const;

 private:
  mutable Mutex mu_;
  std::thread writer_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // the last finished write's
  std::string last_written_ ABSL_GUARDED_BY(mu_);
  double last_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_failure_ ABSL_GUARDED_BY(mu_);
  TrainSnapshot buffers_ ABSL_GUARDED_BY(mu_);  // the finished write's snapshot
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_TRAIN_CHECKPOINT_H_
