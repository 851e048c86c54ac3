#include "job/elastic_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/flat_buckets.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace trainyard {

namespace {

// Broadcast buckets of up to 64 MiB, so that a model's hundreds of tensors
// cost a few broadcasts.
constexpr int64_t kBroadcastBucketBytes = int64_t{64} << 20;

// Every rank's step (-1: fresh), in rank order.
absl::StatusOr<std::vector<int64_t>> GatherSteps(const JobComponents& job, bool fresh) {
  std::vector<torch::Tensor> steps;
  TY_RETURN_IF_ERROR(CollectiveFailure(
      job.collective->AllGather(torch::tensor({fresh ? int64_t{-1} : job.trainer->step()}, torch::kLong), &steps)));
  std::vector<int64_t> out;
  out.reserve(steps.size());
  for (const torch::Tensor& t : steps) out.push_back(t.item<int64_t>());
  return out;
}

// The parameters this rank holds (PARAMETERS sharding: its own; the
// others' hold no memory between steps), in the model's order.
std::vector<torch::Tensor> HeldParameters(const JobComponents& job) {
  std::vector<torch::Tensor> out;
  for (const auto& p : job.model->named_parameters()) {
    if (job.shards.Owns(p.key())) out.push_back(p.value().detach());
  }
  return out;
}

// Broadcasts `tensors` from `source` of `collective` in flat buckets, in
// place on every other rank, or on `receivers` only when given.
absl::Status BroadcastTensors(Collective* collective, const std::vector<torch::Tensor>& tensors, int source,
                              const std::vector<int>* receivers, RegroupOutcome* out) {
  for (const FlatBucket& bucket : PackFlatBuckets(tensors, kBroadcastBucketBytes)) {
    std::vector<torch::Tensor> one = {bucket.flat};
    TY_RETURN_IF_ERROR(CollectiveFailure(receivers ? collective->BroadcastTo(one, source, *receivers)
                                                   : collective->Broadcast(one, source)));
    const bool received =
        !receivers || std::find(receivers->begin(), receivers->end(), collective->rank()) != receivers->end();
    if (received) UnpackFlatBucket(bucket);
    out->sent_bytes += static_cast<int64_t>(bucket.flat.nbytes());
  }
  return absl::OkStatus();
}

// Broadcasts the parameters (as this rank holds them) and the optimizer
// state (with its step) from `source` of `collective`, and the data
// position from `position_source` of the job's collective; applies them on
// every other rank. `behind` (the job's collective only): the ranks not at
// the source's step, the only ones sent to and changed (the others hold
// the same state already).
absl::Status BroadcastState(JobComponents* job, Collective* collective, int source, int position_source,
                            const std::vector<int>* behind, RegroupOutcome* out) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> state = job->optimizer->State();  // the slots themselves, and the step
  std::vector<torch::Tensor> tensors = HeldParameters(*job);
  for (auto& [name, t] : state) tensors.push_back(t);
  // Whether this rank takes what is sent on the job's collective.
  const bool takes = !behind || std::find(behind->begin(), behind->end(), job->rank()) != behind->end();
  const bool receives = source >= 0 && collective->rank() != source && takes;
  if (collective == job->collective) {
    source = position_source;  // one broadcast of everything
  } else {
    if (source >= 0) TY_RETURN_IF_ERROR(BroadcastTensors(collective, tensors, source, nullptr, out));
    tensors.clear();
  }
  TaskIterator* it = job->train_batches->task_iterator();
  torch::Tensor position = DataPositionTensor(*it);
  tensors.push_back(position);
  // data_parallel.reproducible: the exact sum's scales, by name (the same
  // names in the same order on every rank).
  std::map<std::string, int> exponents = job->trainer->ExactSumExponents();
  torch::Tensor scales = torch::zeros({static_cast<int64_t>(exponents.size())}, torch::kLong);
  {
    int64_t i = 0;
    for (const auto& [name, e] : exponents) scales[i++] = e;
  }
  if (!exponents.empty()) tensors.push_back(scales);
  TY_RETURN_IF_ERROR(BroadcastTensors(job->collective, tensors, position_source, behind, out));
  const bool moved = job->rank() != position_source && takes;
  if (moved) TY_RETURN_IF_ERROR(it->Restore(DataPositionState(position)));
  if (moved && !exponents.empty()) {
    int64_t i = 0;
    for (auto& [name, e] : exponents) e = static_cast<int>(scales[i++].item<int64_t>());
  }
  if (collective != job->collective && job->optimizer->shard_bounds().size() > 2 && !job->shards.sharded()) {
    // OPTIMIZER, GRADIENTS: each rank's own shard of the parameters is now
    // current (another's may not be, on a rank whose last step's gather
    // failed): gathered again in the new shard group.
    TY_RETURN_IF_ERROR(CollectiveFailure(job->optimizer->Synchronize()));
  }
  if (!receives) return absl::OkStatus();
  TY_RETURN_IF_ERROR(job->optimizer->LoadState(state));
  // The trainer reads its step from the optimizer when it is made.
  TY_RETURN_IF_ERROR(job->BuildTrainer());
  return exponents.empty() ? absl::OkStatus() : job->trainer->RestoreExactSumExponents(exponents);
}

// Hybrid sharding: the rank of its replica set (the ranks holding its
// shard, one per shard group) whose state the set takes: the lowest at
// `furthest`; -1 when every one is there. kFailedPrecondition when some
// set has none there (checked for every set, so every rank fails alike).
absl::StatusOr<int> ReplicaSource(const std::vector<int64_t>& steps, int64_t furthest, int group_size, int rank) {
  const int world = static_cast<int>(steps.size());
  int mine = -1;
  for (int set = 0; set < group_size; ++set) {
    int source = -1, behind = 0;
    std::vector<std::string> held;
    for (int g = 0; g * group_size + set < world; ++g) {
      const int64_t step = steps[static_cast<size_t>(g * group_size + set)];
      if (step == furthest && source < 0) source = g;
      if (step != furthest) ++behind;
      held.push_back(absl::StrCat(step));
    }
    if (source < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", set, " of the hybrid-sharded state is at step(s) ", absl::StrJoin(held, ", "),
                       " in the surviving shard groups, none at step ", furthest,
                       " where the others are (a step left done in some groups only); the attempt restarts"));
    }
    if (set == rank % group_size) mine = behind > 0 ? source : -1;
  }
  return mine;
}

}  // namespace

absl::StatusOr<RegroupOutcome> RegroupState(JobComponents* job, Collective* collective, bool fresh) {
  if (!job->elastic() || !job->trainer || !job->train_batches) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job->id(), ": Regroup needs a training job with fault_tolerance ELASTIC"));
  }
  RegroupOutcome out;
  try {
    // A fresh rank built ahead of its group (on an UnconnectedCollective)
    // moves to it too.
    if (!fresh || collective != job->collective) TY_RETURN_IF_ERROR(job->MoveTo(collective));
    // The lowest rank at the furthest step is the source.
    TY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, GatherSteps(*job, fresh));
    const int64_t furthest = *std::max_element(steps.begin(), steps.end());
    if (furthest < 0) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job->id(), ": regrouping ", job->world_size(),
                                                        " rank(s), none of which holds the training state"));
    }
    const bool differ = std::any_of(steps.begin(), steps.end(), [&](int64_t s) { return s != furthest; });
    // A rank at the furthest step receives what it holds (or sends): a
    // failure midway leaves its state whole.
    job->receiving_state = steps[static_cast<size_t>(job->rank())] != furthest;
    if (differ) {
      out.source_rank = static_cast<int>(std::find(steps.begin(), steps.end(), furthest) - steps.begin());
      const auto t0 = std::chrono::steady_clock::now();
      if (job->spec.data_parallel().sharding() == DataParallelConfig::NONE) {
        // Only to the ranks behind (a joiner): the others hold this state.
        std::vector<int> behind;
        for (size_t r = 0; r < steps.size(); ++r) {
          if (steps[r] != furthest) behind.push_back(static_cast<int>(r));
        }
        TY_RETURN_IF_ERROR(BroadcastState(job, job->collective, out.source_rank, out.source_rank, &behind, &out));
      } else {
        // Each shard from a rank of its replica set that holds it at the
        // furthest step.
        const int group_size = job->collective->sharding_group()->world_size();
        TY_ASSIGN_OR_RETURN(const int source, ReplicaSource(steps, furthest, group_size, job->rank()));
        // (One group left: no replicas, and no rank may be behind.)
        TY_RETURN_IF_ERROR(BroadcastState(job, job->collective->replica_set(), source, out.source_rank, nullptr, &out));
      }
      TY_RETURN_IF_ERROR(CollectiveFailure(job->batches->ledger()->ShareFrom(job->collective, out.source_rank)));
      out.transfer_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    job->receiving_state = false;
    out.step = job->trainer->step();
    out.state_digest = StateDigest(*job);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("regrouping: ", e.what()));
  }
  spdlog::info("job {}: rank {} of {} at step {}{}", job->id(), job->rank(), job->world_size(), out.step,
               out.source_rank < 0 ? std::string(" (every rank held the same step)")
                                   : absl::StrCat(" (state of rank ", out.source_rank, ", ", out.sent_bytes,
                                                  " bytes in ", out.transfer_seconds, " s)"));
  return out;
}

uint64_t StateDigest(const JobComponents& job) {
  // FNV-1a over 64-bit words (the tail bytewise), chained over the tensors
  // in a fixed order.
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  auto add = [&mix](const torch::Tensor& tensor) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    const size_t n = t.nbytes();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      mix(word);
    }
    for (; i < n; ++i) mix(bytes[i]);
    mix(n);
  };
  for (const torch::Tensor& p : HeldParameters(job)) add(p);
  if (job.optimizer) {
    for (const auto& [name, t] : job.optimizer->State()) add(t);
  }
  if (job.trainer) {
    for (const auto& [name, e] : job.trainer->ExactSumExponents()) mix(static_cast<uint64_t>(e));
  }
  if (job.train_batches) {
    TaskBatchIterator* batches = job.train_batches.get();
    const TaskIterator* it = batches->task_iterator();
    mix(static_cast<uint64_t>(it->epoch()));
    mix(static_cast<uint64_t>(it->position()));
    mix(static_cast<uint64_t>(it->segment()));
  }
  return h;
}

}  // namespace trainyard
