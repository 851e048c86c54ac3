#include "job/job_checkpoints.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "job/job_internal.h"
#include "spdlog/spdlog.h"
#include "trainer/restore.h"

namespace trainyard {

using job_internal::Raised;

namespace {

// Reads the checkpoint a restore takes, on this rank: a restart of this job
// (the coordinator names the job's newest) takes that one, or if it does
// not read back whole the newest one under output_dir that does; otherwise
// (or if none of the job's own reads back) the spec's choice. `path` stays
// empty for a start from scratch.
absl::Status ReadRestoreCheckpoint(const JobSpec& spec, const std::string& named, const SlotFilter& keep_slot,
                                   const ParamFilter& keep_param, std::vector<SkippedCheckpoint>* skipped,
                                   absl::StatusOr<TrainCheckpoint>* ckpt, std::string* path) {
  const RestoreConfig& restore = spec.restore();
  // ALL restores every checkpoint in turn (RestoreNext), none at the start.
  if (restore.mode() == RestoreConfig::ALL) return absl::OkStatus();
  if (!named.empty()) {
    *ckpt = ReadRestartCheckpoint(named, spec.output_dir(), skipped, keep_slot, keep_param);
    if (ckpt->ok()) {
      *path = (*ckpt)->dir;
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(ckpt->status())) {
      return absl::Status(ckpt->status().code(), absl::StrCat("restore: ", ckpt->status().message()));
    }
  }
  TY_ASSIGN_OR_RETURN(*path, ChooseCheckpoint(restore, spec.output_dir(), skipped));
  if (!path->empty()) {
    *ckpt = ReadTrainCheckpoint(*path, keep_slot, keep_param);
    if (!ckpt->ok()) return absl::Status(ckpt->status().code(), absl::StrCat("restore: ", ckpt->status().message()));
  }
  const bool needs_checkpoint = spec.kind() == FINETUNING || spec.kind() == EVALUATION || spec.kind() == INFERENCE;
  if (path->empty() && needs_checkpoint && !restore.fallback_to_scratch()) {
    return absl::FailedPreconditionError(absl::StrCat("restore: a ", JobKind_Name(spec.kind()),
                                                      " job starts from a checkpoint, and none was found under ",
                                                      restore.path().empty() ? spec.output_dir() : restore.path()));
  }
  return absl::OkStatus();
}

// Rank 0's retention after a checkpoint is written: keep_checkpoints and
// the best ones (checkpoint.keep_best).
std::function<void()> RetentionAfterSave(const JobSpec& spec) {
  return [output_dir = spec.output_dir(), keep = spec.keep_checkpoints(), keep_best = spec.checkpoint().keep_best(),
          maximize = spec.checkpoint().best_mode() == EarlyStopping::MAX] {
    ApplyRetention(output_dir, keep, keep_best, maximize);
  };
}

}  // namespace

absl::StatusOr<RestoreOutcome> JobCheckpoints::Restore(const std::string& named) {
  const JobSpec& spec = job_->spec;
  if (job_->rank() == 0 && job_->trains() && !spec.output_dir().empty()) {
    for (const std::string& name : RemoveUnfinishedCheckpoints(spec.output_dir())) {
      spdlog::warn("job {}: removed {}/{}, left by a save that did not finish", job_->id(), spec.output_dir(), name);
    }
  }
  // A sharded optimizer keeps its own slots only (LoadState drops the
  // rest), so only those are read: the restore's memory is the shard's.
  std::set<std::string> own_slots;
  SlotFilter keep_slot;
  if (job_->optimizer && !job_->optimizer->shard_bounds().empty()) {
    for (const auto& [name, t] : job_->optimizer->State()) own_slots.insert(name);
    keep_slot = [&own_slots](const std::string& slot) { return own_slots.count(slot) > 0; };
  }
  // PARAMETERS: this rank reads and assigns its own parameters only (the
  // others' are not in memory here), so a restore never holds the whole
  // model. A renaming assignment map reads everything and assigns the own.
  ParamFilter hold, keep_param;
  if (job_->trainer && job_->trainer->parameters_sharded()) {
    hold = job_->shards.OwnFilter();
    if (spec.restore().assignment_map_size() == 0) keep_param = hold;
  }
  std::vector<SkippedCheckpoint> skipped;
  absl::StatusOr<TrainCheckpoint> ckpt = absl::NotFoundError("no checkpoint");
  std::string path;
  absl::Status read = ReadRestoreCheckpoint(spec, named, keep_slot, keep_param, &skipped, &ckpt, &path);
  // The vocabulary its model reads (a training job's task must have it).
  absl::StatusOr<VocabularyPlan> vocabulary = absl::NotFoundError("no checkpoint");
  if (read.ok() && !path.empty()) {
    vocabulary = job_->PlanVocabulary(path);
    read = vocabulary.status();
  }
  // Every rank reads the checkpoint itself; they must all have one, and the
  // same step (the output_dir has to be on a filesystem every rank sees).
  TY_RETURN_IF_ERROR(CollectiveFailure(AgreeOnOutcome(job_->collective, read, "restoring the checkpoint")));
  const int64_t step = path.empty() ? -1 : ckpt->step;
  absl::StatusOr<int64_t> agreed =
      AgreeOnValue(job_->collective, step, "restore: the step of the checkpoint (-1: none)");
  if (absl::IsFailedPrecondition(agreed.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(agreed.status().message(),
                     ": the ranks found different checkpoints; output_dir must be on a filesystem "
                     "every worker shares"));
  }
  TY_RETURN_IF_ERROR(CollectiveFailure(agreed.status()));

  RestoreOutcome out;
  out.passed_over = SetAsidePassedOver(skipped);
  if (path.empty()) return out;  // from scratch
  try {
    TY_RETURN_IF_ERROR(Apply(*ckpt, hold));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("restore: ", path, ": ", e.what()));
  }
  job_->UseVocabulary(std::move(*vocabulary));
  restored_step_ = ckpt->step;
  out.step = ckpt->step;
  out.checkpoint = path;
  spdlog::info("job {}: restored {} (step {}){}", job_->id(), path, ckpt->step,
               ckpt->optimizer.empty() ? " (parameters only: a fresh optimizer)" : "");
  return out;
}

absl::StatusOr<std::optional<NumberedCheckpoint>> JobCheckpoints::AgreeOnNext(const std::string& where,
                                                                              int64_t after_step,
                                                                              std::vector<SkippedCheckpoint>* skipped) {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::optional<NumberedCheckpoint> mine = NextGoodCheckpoint(where, after_step, skipped);
  // The smallest step any rank found: one that was renamed into place while
  // the ranks looked is taken by all of them, not by the one that saw it.
  absl::StatusOr<int64_t> step = LowestValue(job_->collective, mine ? mine->step : kNone);
  TY_RETURN_IF_ERROR(CollectiveFailure(step.status()));
  if (*step == kNone) return std::optional<NumberedCheckpoint>();
  return NumberedCheckpoint{*step, absl::StrCat(where, "/checkpoint_", *step)};
}

absl::StatusOr<RestoreOutcome> JobCheckpoints::RestoreNext(int64_t after_step) {
  const JobSpec& spec = job_->spec;
  const std::string where = spec.restore().path().empty() ? spec.output_dir() : spec.restore().path();
  std::vector<SkippedCheckpoint> skipped;
  RestoreOutcome out;
  for (;;) {
    TY_ASSIGN_OR_RETURN(std::optional<NumberedCheckpoint> next, AgreeOnNext(where, after_step, &skipped));
    if (!next) break;
    absl::StatusOr<TrainCheckpoint> ckpt = ReadTrainCheckpoint(next->dir);
    absl::Status read = ckpt.status();
    absl::StatusOr<VocabularyPlan> vocabulary = absl::NotFoundError("no checkpoint");
    if (read.ok()) {
      vocabulary = job_->PlanVocabulary(next->dir);
      read = vocabulary.status();
    }
    // Gone or damaged since it was listed (the retention of the job that
    // writes them): every rank passes it over and looks for the next.
    const bool gone = absl::IsNotFound(read) || absl::IsDataLoss(read);
    absl::StatusOr<bool> any_gone = AnyRank(job_->collective, gone);
    TY_RETURN_IF_ERROR(CollectiveFailure(any_gone.status()));
    if (*any_gone) {
      skipped.push_back({next->dir, gone ? std::string(read.message()) : "it did not read back whole on another rank"});
      after_step = next->step;
      continue;
    }
    TY_RETURN_IF_ERROR(CollectiveFailure(AgreeOnOutcome(job_->collective, read, "restoring the checkpoint")));
    try {
      TY_RETURN_IF_ERROR(Apply(*ckpt, nullptr));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("restore: ", next->dir, ": ", e.what()));
    }
    job_->UseVocabulary(std::move(*vocabulary));
    restored_step_ = out.step = next->step;
    out.checkpoint = next->dir;
    spdlog::info("job {}: restored {} (step {})", job_->id(), next->dir, next->step);
    break;
  }
  for (const SkippedCheckpoint& s : skipped) {
    std::string note = absl::StrCat(s.dir, " passed over: ", s.why);
    // Each once per attempt in the log (the sweep looks again at every poll).
    if (reported_.insert(note).second) spdlog::warn("job {}: {}", job_->id(), note);
    out.passed_over.push_back(std::move(note));
  }
  return out;
}

std::vector<std::string> JobCheckpoints::SetAsidePassedOver(const std::vector<SkippedCheckpoint>& skipped) {
  std::vector<std::string> notes;
  std::set<std::string> seen;
  const std::filesystem::path output_dir(job_->spec.output_dir());
  for (const SkippedCheckpoint& s : skipped) {
    if (!seen.insert(s.dir).second) continue;
    std::string note = absl::StrCat(s.dir, " passed over: ", s.why);
    spdlog::warn("job {}: {}", job_->id(), note);
    if (job_->rank() == 0 && job_->trains() && std::filesystem::path(s.dir).parent_path() == output_dir &&
        std::filesystem::exists(s.dir)) {
      absl::StatusOr<std::string> moved = SetAsideDamagedCheckpoint(s.dir);
      if (moved.ok()) {
        absl::StrAppend(&note, " (moved aside to ", *moved, ")");
        spdlog::warn("job {}: moved {} aside to {}", job_->id(), s.dir, *moved);
      } else {
        spdlog::error("job {}: {}", job_->id(), std::string(moved.status().message()));
      }
    }
    notes.push_back(std::move(note));
  }
  return notes;
}

absl::Status JobCheckpoints::Apply(const TrainCheckpoint& ckpt, const ParamFilter& hold) {
  TY_ASSIGN_OR_RETURN(bool with_optimizer, ApplyCheckpoint(ckpt, job_->spec.restore(), job_->model->network().get(),
                                                           job_->optimizer.get(), hold));
  if (!with_optimizer || !job_->train_batches) return absl::OkStatus();
  if (job_->trainer && IsReproducibleTraining(job_->spec)) {
    // The scales of the next step's exact sum: the uninterrupted run's.
    // Without them (a checkpoint of a job that was not reproducible, or of
    // other parameters), the first step finds its own.
    const absl::Status scales = ckpt.exact_sum_exponents.empty()
                                    ? absl::NotFoundError("it has none")
                                    : job_->trainer->RestoreExactSumExponents(ckpt.exact_sum_exponents);
    if (!scales.ok() && job_->rank() == 0) {
      spdlog::warn(
          "job {}: {}: no exact-sum scales taken ({}); the first step finds them, and its sums may round "
          "otherwise than the run that wrote it",
          job_->id(), ckpt.dir, std::string(scales.message()));
    }
  }
  TaskIterator* it = job_->train_batches->task_iterator();
  // Data positions: exact when the world size is the same; otherwise every
  // rank starts at the epoch after the furthest one recorded. One position
  // is the whole global batch's (an ELASTIC job's, or one rank's), which is
  // where an ELASTIC job reads.
  const bool global = job_->global_batches();
  const int world = job_->world_size();
  if (global && ckpt.data_states.size() == 1) return it->Restore(ckpt.data_states[0]);
  if (!global && ckpt.world_size == world && static_cast<int>(ckpt.data_states.size()) == world) {
    return it->Restore(ckpt.data_states[job_->rank()]);
  }
  if (ckpt.data_states.empty()) {
    // An imported checkpoint (`trainyard convert --from-t5x`): another
    // job's data, so this one's starts at its beginning.
    spdlog::info("job {}: {} has no data positions: the data starts at its beginning", job_->id(), ckpt.dir);
    return absl::OkStatus();
  }
  const IteratorPosition resume = ResumeAfterFurthestEpoch(ckpt.data_states);
  spdlog::warn("job {}: {} has data positions for {} workers, this job has {}: every rank starts epoch {}", job_->id(),
               ckpt.dir, ckpt.world_size, world, resume.epoch);
  return it->Restore(FormatIteratorState(resume));
}

absl::StatusOr<std::vector<std::string>> JobCheckpoints::GatherDataStates() {
  if (!job_->train_batches) return std::vector<std::string>();
  const TaskIterator* it = job_->train_batches->task_iterator();
  // ELASTIC and reproducible: one position, of the global batches, the
  // same on every rank (and what one rank reading every batch would have).
  if (job_->global_batches()) return std::vector<std::string>{it->State()};
  std::vector<torch::Tensor> all;
  TY_RETURN_IF_ERROR(CollectiveFailure(job_->collective->AllGather(DataPositionTensor(*it), &all)));
  std::vector<std::string> states;
  states.reserve(all.size());
  for (const torch::Tensor& t : all) states.push_back(DataPositionState(t));
  return states;
}

absl::StatusOr<std::string> JobCheckpoints::WriteEmergency(bool abandoned, double* seconds) {
  // Every rank stopped at the same point; was it a preemption on any of
  // them (then write the emergency checkpoint), or an abort?
  const int64_t step = job_->trainer->step();
  absl::StatusOr<bool> preempted = AnyRank(job_->collective, Raised(job_->options.preempted));
  TY_RETURN_IF_ERROR(CollectiveFailure(preempted.status()));
  if (!*preempted) return absl::AbortedError(absl::StrCat("job ", job_->id(), " was aborted at step ", step));
  if (abandoned) {
    TY_RETURN_IF_ERROR(job_->batches->PutBackLast());
    spdlog::info("job {}: stopped between microbatches of step {}; its batch was put back", job_->id(), step);
  }
  const auto t0 = std::chrono::steady_clock::now();
  TY_ASSIGN_OR_RETURN(std::string path, Save(/*wait=*/true));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::warn("job {}: preempted after step {}; emergency checkpoint {} written in {:.2f} s", job_->id(), step,
               path.empty() ? "(rank 0's)" : path, *seconds);
  return path;
}

absl::StatusOr<std::string> JobCheckpoints::Save(bool wait) {
  const JobSpec& spec = job_->spec;
  if (!job_->trainer) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_->id(), " does not train: nothing to save"));
  }
  if (spec.output_dir().empty()) return absl::FailedPreconditionError("SaveCheckpoint: the job has no output_dir");
  const int rank = job_->rank(), world = job_->world_size();
  TY_ASSIGN_OR_RETURN(std::vector<std::string> states, GatherDataStates());
  // A sharded optimizer's state: every rank writes its own slots into one
  // checkpoint (version 3, trainer/train_checkpoint.h), named for this
  // save by rank 0's token. Otherwise rank 0 writes the whole state.
  const bool shards = !job_->optimizer->shard_bounds().empty();
  std::map<std::string, torch::Tensor> optimizer_state;
  std::string token;
  // HSDP: the first shard group writes its G shards; the other groups hold
  // the same ones.
  const int shard = job_->sharding()->rank(), num_shards = job_->sharding()->world_size();
  if (shards) {
    TY_ASSIGN_OR_RETURN(token, SaveToken());
    if (rank != shard) return std::string();
    optimizer_state = job_->optimizer->State();
  } else {
    TY_ASSIGN_OR_RETURN(optimizer_state, job_->optimizer->GatherState());
    if (rank != 0) return std::string();
  }
  const int64_t step = job_->trainer->step();
  const std::string dir = absl::StrCat(spec.output_dir(), "/checkpoint_", step);
  // The output directory may not exist yet (the summary writers create it
  // in the background).
  std::error_code mkdir_error;
  std::filesystem::create_directories(spec.output_dir(), mkdir_error);
  if (checkpointer_.last_written() == dir) return dir;  // already written (e.g. preempted at a boundary)
  if (last_save_started_ == dir) {
    // This step's save is in flight (a stop right after a boundary): wait
    // for it rather than write the same directory twice.
    if (!wait) return checkpointer_.last_written();
    absl::Status written = checkpointer_.Wait();
    if (written.ok()) return dir;
    spdlog::error("job {}: the save of {} failed ({}); writing it again", job_->id(), dir, written.ToString());
  }
  std::string spec_json;
  (void)google::protobuf::util::MessageToJsonString(spec, &spec_json);
  // A waited save takes the host state as it is (nothing trains until it
  // is written): no second copy of the model and its state at the
  // checkpoint. A background one copies, into the last one's buffers.
  const bool borrow = wait;
  TrainSnapshot reuse = borrow ? TrainSnapshot() : checkpointer_.TakeBuffers();
  // PARAMETERS: each rank holds, and writes, only its own parameters
  // (version 4): nothing is gathered to save.
  const bool own_params = job_->trainer->parameters_sharded();
  TrainSnapshot snapshot = shards && rank != 0 && !own_params
                               ? MakeOptimizerShardSnapshot(optimizer_state, step, std::move(reuse), borrow)
                               : MakeSnapshot(*job_->model->network(), optimizer_state, step, world, std::move(states),
                                              spec_json, "trainyard job " + job_->id(), std::move(reuse), borrow,
                                              own_params ? job_->shards.OwnFilter() : nullptr);
  if (rank == 0) {
    snapshot.vocabulary_model = job_->vocabulary_model;
    snapshot.vocabulary_extra_ids = job_->vocabulary->extra_ids();
    snapshot.exact_sum_exponents = job_->trainer->ExactSumExponents();
  }
  if (shards) {
    snapshot.shard = shard;
    snapshot.num_shards = num_shards;
    snapshot.token = token;
    if (own_params) snapshot.param_shards = num_shards;
  }
  const torch::ScalarType dtype = spec.checkpoint().save_dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat;
  last_save_started_ = dir;
  absl::StatusOr<double> waited =
      checkpointer_.Save(dir, std::move(snapshot), dtype, rank == 0 ? RetentionAfterSave(spec) : nullptr);
  if (!waited.ok()) {
    // The previous write failed; the previous good checkpoint stays.
    spdlog::error("job {}: a checkpoint write failed: {}", job_->id(), waited.status().ToString());
  }
  if (wait) {
    TY_RETURN_IF_ERROR(checkpointer_.Wait());
    return rank == 0 ? dir : std::string();  // the others wrote their shards only
  }
  return rank == 0 ? checkpointer_.last_written() : std::string();
}

absl::StatusOr<std::string> JobCheckpoints::SaveToken() {
  torch::Tensor token = torch::zeros({1}, torch::kLong);
  if (job_->rank() == 0) {
    std::random_device device;
    token[0] = static_cast<int64_t>((static_cast<uint64_t>(device()) << 31) ^ device()) & ((int64_t{1} << 62) - 1);
  }
  std::vector<torch::Tensor> tensors = {token};
  TY_RETURN_IF_ERROR(job_->collective->Broadcast(tensors, 0));
  return absl::StrCat("s", token.item<int64_t>());
}

}  // namespace trainyard
