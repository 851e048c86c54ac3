// WorkerCore's StartJob: a job built and started (restored, or joined to
// a running ELASTIC attempt), or built ahead of its join (`prepare`) and
// held until the join forms its group.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/durable_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "job/training_job.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec.h"
#include "worker/worker_core.h"
#include "worker/worker_core_job.h"

namespace trainyard {
namespace {

// Writes the spec to output_dir/config.textproto, creating output_dir.
absl::Status WriteJobConfig(const JobSpec& spec) {
  std::error_code ec;
  std::filesystem::create_directories(spec.output_dir(), ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("output_dir: cannot create ", spec.output_dir(), ": ", ec.message()));
  }
  const std::string config = spec.output_dir() + "/config.textproto";
  if (absl::Status written = WriteFileAtomically(config, FormatJobSpecText(spec)); !written.ok()) {
    return absl::Status(written.code(), absl::StrCat("output_dir: writing ", config, ": ", written.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WorkerCore::ReleaseFailedStart(const std::shared_ptr<Job>& job, absl::Status failure) {
  // The training job goes before the groups it uses, all in the background:
  // a group whose aborted operation still waits for a lost peer closes only
  // at the collective's timeout, and the call's answer must not wait for it.
  std::shared_ptr<Collective> group = SwapCollective(job.get(), nullptr, job->generation);
  std::shared_ptr<TrainingJob> training(std::move(job->training));
  std::shared_ptr<Collective> unconnected(std::move(job->unconnected));
  if (group || training) {
    teardowns_.Start(
        [training = std::move(training), unconnected = std::move(unconnected), group = std::move(group)]() mutable {
          training.reset();
          unconnected.reset();
          group.reset();
        });
  }
  MutexLock lock(&mu_);
  if (job_ == job) job_.reset();
  SetLogJob("", -1);
  return failure;
}

absl::StatusOr<StartJobResponse> WorkerCore::StartJob(const StartJobRequest& request) {
  const int world = request.world_size();
  const int rank = request.rank();
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("StartJob: rank ", rank, " is not in [0, ", world, ")"));
  }
  if (request.prepare() && !request.join()) {
    return absl::InvalidArgumentError("StartJob: prepare is the first half of a join; set join too");
  }
  if (request.join() && !IsElasticTraining(request.spec())) {
    return absl::InvalidArgumentError("StartJob: join needs a job with fault_tolerance ELASTIC");
  }
  std::shared_ptr<Job> job;
  bool prepared = false;
  {
    MutexLock lock(&mu_);
    if (job_ && job_->prepared && !request.prepare() && request.join() && job_->id == request.job_id()) {
      job = job_;  // built ahead (PrepareJob): the worker is claimed already
      job->prepared = false;
      prepared = true;
    } else {
      TY_RETURN_IF_ERROR(CheckFreeLocked());
      job = std::make_shared<Job>();
      job->id = request.job_id();
      job->spec = request.spec();
      job_ = job;  // claims the worker; released on failure
    }
  }
  SetLogJob(job->id, rank);
  MutexLock busy(&job->busy);
  if (prepared && job->stop) {
    return absl::UnavailableError(
        absl::StrCat("job ", job->id, ": the job built ahead was let go: ", job->stop_reason));
  }
  if (request.prepare()) return PrepareJob(job, request);
  return BuildAndStart(job, request, prepared);
}

absl::StatusOr<StartJobResponse> WorkerCore::PrepareJob(const std::shared_ptr<Job>& job,
                                                        const StartJobRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  job->rank = request.rank();
  job->world_size = request.world_size();
  job->attempt = request.attempt();
  absl::StatusOr<std::unique_ptr<Collective>> place =
      MakeJobCollective("", job->rank, job->world_size, job->spec, /*connect=*/false);
  if (!place.ok()) return ReleaseFailedStart(job, place.status());
  job->unconnected = std::move(*place);
  absl::StatusOr<std::unique_ptr<TrainingJob>> training =
      TrainingJob::Create(job->spec, job->unconnected.get(), TrainingOptions(job.get()));
  if (!training.ok()) return ReleaseFailedStart(job, training.status());
  job->training = std::move(*training);
  if (job->stop)
    return ReleaseFailedStart(job,
                              absl::AbortedError(absl::StrCat("job ", job->id, ": let go while it was built ahead")));
  {
    MutexLock lock(&mu_);
    job->prepared = true;
  }
  spdlog::info("job {}: built ahead of joining as rank {}/{} in {:.2f} s", job->id, job->rank, job->world_size,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  StartJobResponse response;
  response.set_start_step(job->training->step());
  return response;
}

TrainingJobOptions WorkerCore::TrainingOptions(Job* job) const {
  TrainingJobOptions options;
  options.id = job->id;
  options.device = options_.device;
  options.peak_flops = options_.peak_flops;
  options.stop = &job->stop;
  options.preempted = &job->preempt;
  return options;
}

absl::StatusOr<StartJobResponse> WorkerCore::BuildAndStart(const std::shared_ptr<Job>& job,
                                                           const StartJobRequest& request, bool prepared) {
  const JobSpec& spec = request.spec();
  const int world = request.world_size();
  const int rank = request.rank();
  const auto start = std::chrono::steady_clock::now();
  // A job built ahead for another place follows it when its state is
  // replicated (the move rebuilds the trainer; every rank reads the global
  // batches); sharded state is built again.
  if (prepared && (job->attempt != request.attempt() || (spec.data_parallel().sharding() != DataParallelConfig::NONE &&
                                                         (job->rank != rank || job->world_size != world)))) {
    spdlog::info("job {}: built ahead as rank {}/{}, joins as {}/{}: building again", job->id, job->rank,
                 job->world_size, rank, world);
    job->training.reset();
    job->unconnected.reset();
    prepared = false;
  }
  job->rank = rank;
  job->world_size = world;
  job->attempt = request.attempt();
  job->generation = request.generation();
  absl::StatusOr<std::unique_ptr<Collective>> collective = FormGroup(job.get(), rank, world, request.generation());
  if (!collective.ok()) return ReleaseFailedStart(job, collective.status());
  SwapCollective(job.get(), std::move(*collective), request.generation());
  const auto formed = std::chrono::steady_clock::now();
  absl::Status built = absl::OkStatus();
  if (!prepared) {
    absl::StatusOr<std::unique_ptr<TrainingJob>> training =
        TrainingJob::Create(spec, job->collective.get(), TrainingOptions(job.get()));
    built = training.status();
    if (training.ok()) job->training = std::move(*training);
  }
  // A rank that cannot build the job tells the others before they wait for
  // it in the restore.
  built = AgreeOnOutcome(job->collective.get(), built, "building the job");
  if (!built.ok()) return ReleaseFailedStart(job, CollectiveFailure(built));
  const auto built_at = std::chrono::steady_clock::now();
  StartJobResponse response;
  absl::StatusOr<RestoreOutcome> restored = RestoreOutcome();
  if (request.join()) {
    // A running attempt's new rank: the state comes from its peers (a job
    // built ahead moves to the group first).
    absl::StatusOr<RegroupOutcome> joined = job->training->Regroup(job->collective.get(), /*fresh=*/true);
    if (!joined.ok()) return ReleaseFailedStart(job, joined.status());
    job->unconnected.reset();  // the job is on its group now
    JoinOutcome* out = response.mutable_joined();
    out->set_source_rank(joined->source_rank);
    out->set_sent_bytes(joined->sent_bytes);
    out->set_transfer_seconds(joined->transfer_seconds);
    out->set_state_digest(joined->state_digest);
  } else {
    restored = job->training->Restore(request.restore_checkpoint());
    if (!restored.ok()) return ReleaseFailedStart(job, restored.status());
  }
  if (rank == 0) {
    if (absl::Status written = WriteJobConfig(spec); !written.ok()) return ReleaseFailedStart(job, written);
  }
  const auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
  const auto ready = std::chrono::steady_clock::now();
  spdlog::info(
      "job {}: rank {}/{} ready in {:.2f} s (group formed in {:.2f} s, job {} in {:.2f} s, state {} in {:.2f} s; "
      "{} rows per batch on this rank)",
      job->id, rank, world, seconds(start, ready), seconds(start, formed), prepared ? "built ahead, checked" : "built",
      seconds(formed, built_at), request.join() ? "received" : "set up", seconds(built_at, ready),
      spec.batch_size() / world);
  response.set_start_step(job->training->step());
  response.set_restored_checkpoint(restored->checkpoint);
  for (const std::string& note : restored->passed_over) response.add_passed_over(note);
  return response;
}

}  // namespace trainyard
