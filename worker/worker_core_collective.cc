// WorkerCore's collectives: local for one rank, NCCL on a CUDA device (CUDA
// builds), Gloo otherwise.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/gloo_collective.h"
#include "collective/hybrid_collective.h"
#include "common/status_macros.h"
#include "spec/jobspec.h"
#ifdef TRAINYARD_WITH_NCCL
#include "collective/nccl_collective.h"
#endif
#include "worker/worker_core.h"
#include "worker/worker_core_job.h"

namespace trainyard {

absl::StatusOr<std::unique_ptr<Collective>> WorkerCore::MakeCollective(const std::string& scope, int rank, int world,
                                                                       bool connect) {
  if (world == 1) return std::unique_ptr<Collective>(std::make_unique<LocalCollective>());
  if (!connect) return std::unique_ptr<Collective>(std::make_unique<UnconnectedCollective>(rank, world));
  if (!options_.store_factory) return absl::FailedPreconditionError("no rendezvous store configured");
  std::shared_ptr<Store> store = options_.store_factory(scope);
  absl::StatusOr<std::unique_ptr<Collective>> collective;
  if (options_.device.is_cuda()) {
#ifdef TRAINYARD_WITH_NCCL
    NcclOptions nccl;
    nccl.device = options_.device.index();
    nccl.timeout = options_.collective_timeout;
    collective = NcclCollective::Create(rank, world, std::move(store), nccl);
#else
    return absl::FailedPreconditionError("a CUDA device needs a build with NCCL (--config=cuda)");
#endif
  } else {
    GlooOptions gloo;
    gloo.hostname = options_.host_address;
    gloo.timeout = options_.collective_timeout;
    collective = GlooCollective::Create(rank, world, std::move(store), gloo);
  }
  if (!collective.ok()) return CollectiveFailure(collective.status());
  return std::move(*collective);
}

absl::StatusOr<std::unique_ptr<Collective>> WorkerCore::MakeJobCollective(const std::string& scope, int rank, int world,
                                                                          const JobSpec& spec, bool connect) {
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Collective> whole, MakeCollective(scope, rank, world, connect));
  const int g = ShardGroupSize(spec, world);
  if (g == 1 || g == world) return whole;  // replicated, or sharded over every rank
  TY_ASSIGN_OR_RETURN(HybridPlace p, PlaceInHybrid(rank, world, g));
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Collective> group,
                      MakeCollective(absl::StrCat(scope, "/shard-group-", p.group), p.group_rank, g, connect));
  TY_ASSIGN_OR_RETURN(
      std::unique_ptr<Collective> replicas,
      MakeCollective(absl::StrCat(scope, "/replica-set-", p.replica_set), p.replica_rank, world / g, connect));
  return std::unique_ptr<Collective>(
      std::make_unique<HybridCollective>(std::move(whole), std::move(group), std::move(replicas)));
}

absl::StatusOr<std::unique_ptr<Collective>> WorkerCore::FormGroup(Job* job, int rank, int world, int generation) {
  const std::string scope = GroupScope(job->id, job->attempt, generation);
  if (world == 1) return MakeJobCollective(scope, rank, world, job->spec);
  auto formation = std::make_shared<Formation>();
  formation->generation = generation;
  formation->since = absl::Now();
  {
    MutexLock lock(&job->group_mu);
    job->forming = formation;
  }
  formations_.Start([this, formation, scope, rank, world, spec = job->spec] {
    absl::StatusOr<std::unique_ptr<Collective>> made = MakeJobCollective(scope, rank, world, spec);
    MutexLock lock(&formation->mu);
    formation->made = std::move(made);  // dropped with `formation` if nobody waits any more
    formation->finished = true;
    formation->changed.SignalAll();
  });
  absl::StatusOr<std::unique_ptr<Collective>> out = absl::InternalError("unset");
  {
    MutexLock lock(&formation->mu);
    while (!formation->finished && formation->aborted.empty()) formation->changed.Wait(&formation->mu);
    if (formation->finished) {
      out = std::move(formation->made);
    } else {
      out = CollectiveFailure(absl::AbortedError(
          absl::StrCat("forming the group of generation ", generation, " was aborted: ", formation->aborted)));
    }
  }
  MutexLock lock(&job->group_mu);
  if (job->forming == formation) job->forming.reset();
  return out;
}

}  // namespace trainyard
