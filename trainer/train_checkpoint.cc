#include "trainer/train_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_vocabulary.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "common/torch/device.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr char kParams[] = "params.safetensors";
constexpr char kOptimizer[] = "optimizer.safetensors";

// `source` copied into host memory: into `into` when it has the same shape
// and type, else into a fresh tensor. From a GPU the copy goes into pinned
// (page-locked) memory without blocking: the caller synchronises once after
// all copies, and the buffers are reused by the next snapshot.
torch::Tensor CopyInto(const torch::Tensor& source, torch::Tensor into) {
  const bool from_device = !source.device().is_cpu();
  if (!(into.defined() && into.sizes() == source.sizes() && into.scalar_type() == source.scalar_type() &&
        into.device().is_cpu())) {
    into = torch::empty(source.sizes(), torch::TensorOptions().dtype(source.scalar_type()).pinned_memory(from_device));
  }
  into.copy_(source.detach(), /*non_blocking=*/from_device);
  return into;
}

// CopyInto, or with `borrow` a host tensor as it is.
torch::Tensor Take(const torch::Tensor& source, torch::Tensor into, bool borrow) {
  if (borrow && source.device().is_cpu() && source.is_contiguous()) return source.detach();
  return CopyInto(source, std::move(into));
}

// The optimizer's slots into `s` (the step goes in metadata.json), reusing
// `reuse`'s buffers.
void TakeState(const std::map<std::string, torch::Tensor>& optimizer_state, const TrainSnapshot& reuse, bool borrow,
               TrainSnapshot* s) {
  for (const auto& [name, t] : optimizer_state) {
    if (name == "step") continue;
    auto it = reuse.optimizer.find(name);
    s->optimizer[name] = Take(t, it == reuse.optimizer.end() ? torch::Tensor() : it->second, borrow);
  }
  s->borrowed = borrow;
}

}  // namespace

TrainSnapshot MakeSnapshot(T5Impl& model, const Optimizer& optimizer, int64_t step, int world_size,
                           std::vector<std::string> data_states, std::string job_json, std::string source,
                           TrainSnapshot reuse, bool borrow) {
  return MakeSnapshot(model, optimizer.State(), step, world_size, std::move(data_states), std::move(job_json),
                      std::move(source), std::move(reuse), borrow);
}

TrainSnapshot MakeSnapshot(T5Impl& model, const std::map<std::string, torch::Tensor>& optimizer_state, int64_t step,
                           int world_size, std::vector<std::string> data_states, std::string job_json,
                           std::string source, TrainSnapshot reuse, bool borrow,
                           const std::function<bool(const std::string&)>& keep_param) {
  std::map<std::string, torch::Tensor> old_params(reuse.params.begin(), reuse.params.end());
  TrainSnapshot s;
  s.step = step;
  s.config = model.config();
  torch::NoGradGuard no_grad;
  for (const auto& item : model.named_parameters()) {
    if (keep_param && !keep_param(item.key())) continue;
    auto it = old_params.find(item.key());
    s.params.emplace_back(item.key(),
                          Take(item.value(), it == old_params.end() ? torch::Tensor() : it->second, borrow));
  }
  TakeState(optimizer_state, reuse, borrow, &s);
  // The copies from a GPU were queued on its stream: wait for them (the
  // training step that follows may overwrite the parameters).
  if (const std::vector<torch::Tensor> params = model.parameters(); !params.empty()) {
    SynchronizeDevice(params[0].device());
  }
  s.world_size = world_size;
  s.data_states = std::move(data_states);
  s.job_json = std::move(job_json);
  s.source = std::move(source);
  return s;
}

std::string OptimizerShardFile(int shard, int num_shards) {
  return absl::StrFormat("optimizer-%05d-of-%05d.safetensors", shard, num_shards);
}

TrainSnapshot MakeOptimizerShardSnapshot(const std::map<std::string, torch::Tensor>& optimizer_state, int64_t step,
                                         TrainSnapshot reuse, bool borrow) {
  TrainSnapshot s;
  s.step = step;
  torch::NoGradGuard no_grad;
  TakeState(optimizer_state, reuse, borrow, &s);
  if (!s.optimizer.empty()) SynchronizeDevice(optimizer_state.begin()->second.device());
  return s;
}

namespace {

nlohmann::ordered_json Metadata(const TrainSnapshot& snapshot, torch::ScalarType save_dtype) {
  nlohmann::ordered_json meta = {
      {"format", "trainyard.checkpoint"},
      {"version", snapshot.param_shards > 0 ? 4
                  : snapshot.num_shards > 0 ? 3
                                            : 2},
      {"step", snapshot.step},
      {"model_config", nlohmann::json::parse(ModelConfigJson(snapshot.config))},
      {"world_size", snapshot.world_size},
      {"data_states", snapshot.data_states},
      {"save_dtype", save_dtype == torch::kFloat ? "FLOAT32" : "BFLOAT16"},
      {"job", snapshot.job_json.empty() ? nlohmann::json(nullptr) : nlohmann::json::parse(snapshot.job_json)},
      {"source", snapshot.source},
  };
  if (snapshot.num_shards > 0) meta["optimizer_shards"] = snapshot.num_shards;
  if (snapshot.param_shards > 0) meta["param_shards"] = snapshot.param_shards;
  if (!snapshot.exact_sum_exponents.empty()) meta["exact_sum_exponents"] = snapshot.exact_sum_exponents;
  return meta;
}

constexpr char kDoneSuffix[] = ".done";

// Version 3: this rank's files; rank 0 commits.
absl::Status WriteShardedTrainCheckpoint(const std::string& dir, const TrainSnapshot& snapshot,
                                         torch::ScalarType save_dtype) {
  if (snapshot.shard < 0 || snapshot.shard >= snapshot.num_shards || snapshot.token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", dir, ": shard ", snapshot.shard, " of ",
                                                   snapshot.num_shards, " without a save token"));
  }
  if (snapshot.param_shards != 0 && snapshot.param_shards != snapshot.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", dir, ": ", snapshot.param_shards,
                                                   " parameter shards with ", snapshot.num_shards,
                                                   " optimizer shards"));
  }
  const auto start = std::chrono::steady_clock::now();
  // A restarted job computes some steps again: their checkpoints replace
  // those the earlier attempt wrote.
  TY_ASSIGN_OR_RETURN(CheckpointWriter writer, CheckpointWriter::BeginShared(dir, snapshot.token, /*replace=*/true));
  const std::string mine = OptimizerShardFile(snapshot.shard, snapshot.num_shards);
  auto write = [&]() -> absl::Status {
    if (snapshot.param_shards > 0) {
      const std::string params = ParameterShardFile(snapshot.shard, snapshot.param_shards);
      TY_RETURN_IF_ERROR(WriteTensorsAs(writer.Path(params), snapshot.params, save_dtype));
      TY_RETURN_IF_ERROR(FsyncPath(writer.Path(params), false));
    }
    std::vector<std::pair<std::string, torch::Tensor>> optimizer(snapshot.optimizer.begin(), snapshot.optimizer.end());
    TY_RETURN_IF_ERROR(WriteTensorsAs(writer.Path(mine), optimizer, torch::kFloat));
    TY_RETURN_IF_ERROR(FsyncPath(writer.Path(mine), false));
    if (snapshot.shard != 0) {
      // The mark: this rank's file is whole and durable. It appears by a
      // rename, and this rank never touches it again: rank 0 removes it as
      // soon as it sees it.
      const std::string done = writer.Path(mine + kDoneSuffix);
      const std::string pending = done + ".tmp";
      { std::ofstream(pending, std::ios::binary | std::ios::trunc); }
      std::error_code ec;
      std::filesystem::rename(pending, done, ec);
      if (ec)
        return absl::InternalError(absl::StrCat("checkpoint ", dir, ": cannot mark ", mine, " done: ", ec.message()));
      return absl::OkStatus();
    }
    if (snapshot.param_shards == 0)
      TY_RETURN_IF_ERROR(WriteTensorsAs(writer.Path(kParams), snapshot.params, save_dtype));
    // The other ranks write theirs at the same time: wait for their marks.
    const auto own = std::chrono::steady_clock::now() - start;
    const auto deadline = std::chrono::steady_clock::now() + 4 * own +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(snapshot.shard_wait_seconds));
    std::vector<std::string> expected;
    if (snapshot.param_shards == 0) expected.push_back(kParams);
    for (int r = 0; r < snapshot.param_shards; ++r) expected.push_back(ParameterShardFile(r, snapshot.param_shards));
    for (int r = 0; r < snapshot.num_shards; ++r) expected.push_back(OptimizerShardFile(r, snapshot.num_shards));
    for (;;) {
      std::vector<int> missing;
      for (int r = 1; r < snapshot.num_shards; ++r) {
        if (!std::filesystem::exists(writer.Path(OptimizerShardFile(r, snapshot.num_shards) + kDoneSuffix))) {
          missing.push_back(r);
        }
      }
      if (missing.empty()) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("checkpoint ", dir, ": the optimizer shards of rank(s) ",
                                                        absl::StrJoin(missing, ", "),
                                                        " were not written in time; not committed"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (int r = 1; r < snapshot.num_shards; ++r) {
      std::filesystem::remove(writer.Path(OptimizerShardFile(r, snapshot.num_shards) + kDoneSuffix));
    }
    nlohmann::ordered_json meta = Metadata(snapshot, save_dtype);
    TY_RETURN_IF_ERROR(
        WriteCheckpointVocabulary(&writer, snapshot.vocabulary_model, snapshot.vocabulary_extra_ids, &meta));
    return writer.Commit(meta.dump(2) + "\n", expected);
  };
  absl::Status status = write();
  if (!status.ok() && snapshot.shard == 0) writer.Abort();
  return status;
}

}  // namespace

absl::Status WriteTrainCheckpoint(const std::string& dir, const TrainSnapshot& snapshot, torch::ScalarType save_dtype) {
  if (save_dtype != torch::kFloat && save_dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError("checkpoint.save_dtype: parameters are saved as FLOAT32 or BFLOAT16");
  }
  if (snapshot.num_shards > 0) return WriteShardedTrainCheckpoint(dir, snapshot, save_dtype);
  TY_ASSIGN_OR_RETURN(CheckpointWriter writer, CheckpointWriter::Begin(dir, /*replace=*/true));
  auto write = [&]() -> absl::Status {
    TY_RETURN_IF_ERROR(WriteTensorsAs(writer.Path(kParams), snapshot.params, save_dtype));
    std::vector<std::pair<std::string, torch::Tensor>> optimizer(snapshot.optimizer.begin(), snapshot.optimizer.end());
    TY_RETURN_IF_ERROR(WriteTensorsAs(writer.Path(kOptimizer), optimizer, torch::kFloat));
    nlohmann::ordered_json meta = Metadata(snapshot, save_dtype);
    TY_RETURN_IF_ERROR(
        WriteCheckpointVocabulary(&writer, snapshot.vocabulary_model, snapshot.vocabulary_extra_ids, &meta));
    return writer.Commit(meta.dump(2) + "\n");
  };
  absl::Status status = write();
  if (!status.ok()) writer.Abort();
  return status;
}

absl::StatusOr<TrainCheckpoint> ReadTrainCheckpoint(const std::string& dir, const SlotFilter& keep_slot,
                                                    const ParamFilter& keep_param) {
  TY_ASSIGN_OR_RETURN(CheckpointHeader header, ReadCheckpointHeader(dir));
  TrainCheckpoint out;
  out.dir = dir;
  out.version = header.version;
  out.step = header.step;
  out.config = header.config;
  try {
    const nlohmann::json meta = nlohmann::json::parse(header.metadata_json);
    out.world_size = meta.value("world_size", 0);
    if (meta.contains("data_states")) out.data_states = meta["data_states"].get<std::vector<std::string>>();
    out.optimizer_shards = meta.value("optimizer_shards", 0);
    out.param_shards = meta.value("param_shards", 0);
    if (meta.contains("exact_sum_exponents")) {
      out.exact_sum_exponents = meta["exact_sum_exponents"].get<std::map<std::string, int>>();
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.json: ", e.what()));
  }
  TY_ASSIGN_OR_RETURN(out.params, ReadCheckpointParameters(dir, out.param_shards, keep_param));
  if (out.optimizer_shards < 0 || out.optimizer_shards > 1 << 20) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.json: optimizer_shards ", out.optimizer_shards));
  }
  if (out.optimizer_shards > 0) {
    // Every rank's slots, each in exactly one file.
    std::set<std::string> seen;
    for (int r = 0; r < out.optimizer_shards; ++r) {
      const std::string file = OptimizerShardFile(r, out.optimizer_shards);
      std::vector<std::string> names;
      TY_ASSIGN_OR_RETURN(TensorMap part, ReadTensors(dir + "/" + file, keep_slot, &names));
      for (const std::string& name : names) {
        if (!seen.insert(name).second) {
          return absl::DataLossError(absl::StrCat(dir, "/", file, ": ", name, " is in another shard too"));
        }
      }
      out.optimizer.merge(part);
    }
    out.optimizer["step"] = torch::tensor(out.step, torch::kLong);
  } else if (std::filesystem::exists(dir + "/" + kOptimizer)) {
    TY_ASSIGN_OR_RETURN(TensorMap optimizer, ReadTensors(dir + "/" + kOptimizer, keep_slot));
    out.optimizer = std::map<std::string, torch::Tensor>(optimizer.begin(), optimizer.end());
    out.optimizer["step"] = torch::tensor(out.step, torch::kLong);
  }
  return out;
}

std::map<int64_t, std::string> ListCheckpoints(const std::string& dir) {
  std::map<int64_t, std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step;
    if (absl::StartsWith(name, "checkpoint_") && absl::SimpleAtoi(name.substr(11), &step) && entry.is_directory(ec)) {
      out[step] = entry.path().string();
    }
  }
  return out;
}

std::vector<std::string> RemoveUnfinishedCheckpoints(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t tmp = name.find(".tmp-");
    int64_t step;
    if (absl::StartsWith(name, "checkpoint_") && tmp != std::string::npos &&
        absl::SimpleAtoi(name.substr(11, tmp - 11), &step) && entry.is_directory(ec)) {
      std::error_code remove_ec;
      std::filesystem::remove_all(entry.path(), remove_ec);
      if (!remove_ec) removed.push_back(name);
    }
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

absl::StatusOr<std::string> LatestGoodCheckpoint(const std::string& dir, std::vector<SkippedCheckpoint>* skipped) {
  const std::map<int64_t, std::string> all = ListCheckpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    absl::StatusOr<CheckpointContents> verified = VerifyCheckpoint(it->second);
    if (verified.ok()) return it->second;
    if (skipped != nullptr) skipped->push_back({it->second, std::string(verified.status().message())});
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint_<step> under ", dir));
}

std::optional<NumberedCheckpoint> NextGoodCheckpoint(const std::string& dir, int64_t after_step,
                                                     std::vector<SkippedCheckpoint>* skipped) {
  const std::map<int64_t, std::string> all = ListCheckpoints(dir);
  for (auto it = all.upper_bound(after_step); it != all.end(); ++it) {
    absl::StatusOr<CheckpointContents> verified = VerifyCheckpoint(it->second);
    if (verified.ok()) return NumberedCheckpoint{it->first, it->second};
    if (skipped != nullptr) skipped->push_back({it->second, std::string(verified.status().message())});
  }
  return std::nullopt;
}

absl::StatusOr<std::string> SetAsideDamagedCheckpoint(const std::string& dir) {
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  std::string target = absl::StrCat(dir, ".damaged-", now);
  std::error_code ec;
  for (int n = 1; std::filesystem::exists(target, ec); ++n) target = absl::StrCat(dir, ".damaged-", now, "-", n);
  std::filesystem::rename(dir, target, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot move the damaged ", dir, " aside: ", ec.message()));
  return target;
}

namespace {

std::map<int64_t, double> ReadCheckpointMetrics(const std::string& dir) {
  std::map<int64_t, double> out;
  std::ifstream in(dir + "/checkpoint_metrics.json");
  if (!in) return out;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    for (auto it = j.begin(); it != j.end(); ++it) {
      int64_t step;
      if (absl::SimpleAtoi(it.key(), &step) && it.value().is_number()) out[step] = it.value().get<double>();
    }
  } catch (const nlohmann::json::exception&) {
    // Unreadable: no checkpoint counts as best; retention keeps the newest.
  }
  return out;
}

}  // namespace

absl::Status RecordCheckpointMetric(const std::string& dir, int64_t step, double value) {
  std::map<int64_t, double> metrics = ReadCheckpointMetrics(dir);
  metrics[step] = value;
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [s, v] : metrics) j[absl::StrCat(s)] = v;
  return WriteFileAtomically(dir + "/checkpoint_metrics.json", j.dump(2) + "\n");
}

void ApplyRetention(const std::string& dir, int keep, int keep_best, bool maximize) {
  if (keep <= 0) return;
  std::map<int64_t, std::string> all = ListCheckpoints(dir);
  std::set<int64_t> kept;
  for (auto it = all.rbegin(); it != all.rend() && static_cast<int>(kept.size()) < keep; ++it) kept.insert(it->first);
  if (keep_best > 0) {
    std::vector<std::pair<double, int64_t>> ranked;
    for (const auto& [step, value] : ReadCheckpointMetrics(dir)) {
      if (all.count(step)) ranked.emplace_back(maximize ? -value : value, step);
    }
    std::sort(ranked.begin(), ranked.end());
    for (int i = 0; i < keep_best && i < static_cast<int>(ranked.size()); ++i) kept.insert(ranked[i].second);
  }
  for (const auto& [step, path] : all) {
    if (kept.count(step)) continue;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
}

AsyncCheckpointer::~AsyncCheckpointer() { Wait().IgnoreError(); }

absl::StatusOr<double> AsyncCheckpointer::Save(std::string dir, TrainSnapshot snapshot, torch::ScalarType save_dtype,
                                               std::function<void()> after) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status previous = Wait();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    MutexLock lock(&mu_);
    writing_ = true;
  }
  writer_ = std::thread(
      [this, dir = std::move(dir), snapshot = std::move(snapshot), save_dtype, after = std::move(after)]() mutable {
        const auto t0 = std::chrono::steady_clock::now();
        absl::Status s = WriteTrainCheckpoint(dir, snapshot, save_dtype);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s.ok() && after) after();
        if (!s.ok()) {
          spdlog::error("checkpoint {} was not written ({}); the newest checkpoint stays {}", dir, s.ToString(),
                        last_written().empty() ? "none" : last_written());
        }
        MutexLock lock(&mu_);
        status_ = s;
        if (s.ok()) {
          last_written_ = dir;
          last_seconds_ = seconds;
          last_failure_.clear();
        } else {
          last_failure_ = absl::StrCat(dir, ": ", s.message());
        }
        // Borrowed tensors are the live state's: never reused as buffers.
        buffers_ = snapshot.borrowed ? TrainSnapshot() : std::move(snapshot);
        writing_ = false;
      });
  if (!previous.ok()) return previous;
  return waited;
}

absl::Status AsyncCheckpointer::Wait() {
  if (writer_.joinable()) writer_.join();
  MutexLock lock(&mu_);
  absl::Status s = status_;
  status_ = absl::OkStatus();
  return s;
}

TrainSnapshot AsyncCheckpointer::TakeBuffers() {
  {
    MutexLock lock(&mu_);
    if (writing_) return {};  // a write in flight still reads them
  }
  if (writer_.joinable()) writer_.join();  // finished: joins at once
  MutexLock lock(&mu_);
  return std::move(buffers_);
}

std::string AsyncCheckpointer::last_written() const {
  MutexLock lock(&mu_);
  return last_written_;
}

std::string AsyncCheckpointer::last_failure() const {
  MutexLock lock(&mu_);
  return last_failure_;
}

double AsyncCheckpointer::last_write_seconds() const {
  MutexLock lock(&mu_);
  return last_seconds_;
}

}  // namespace trainyard
