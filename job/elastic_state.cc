#include "job/elastic_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
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

// Broadcasts the parameters, the optimizer state (with its step) and the
// data position from `source`, and applies them on every other rank.
absl::Status BroadcastState(JobComponents* job, int source, RegroupOutcome* out) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> state = job->optimizer->State();  // the slots themselves, and the step
  TaskIterator* it = job->train_batches->task_iterator();
  torch::Tensor position = DataPositionTensor(*it);
  std::vector<torch::Tensor> tensors;
  for (const auto& p : job->model->parameters()) tensors.push_back(p.detach());
  for (auto& [name, t] : state) tensors.push_back(t);
  tensors.push_back(position);
  for (const FlatBucket& bucket : PackFlatBuckets(tensors, kBroadcastBucketBytes)) {
    std::vector<torch::Tensor> one = {bucket.flat};
    TY_RETURN_IF_ERROR(CollectiveFailure(job->collective->Broadcast(one, source)));
    UnpackFlatBucket(bucket);
    out->sent_bytes += static_cast<int64_t>(bucket.flat.nbytes());
  }
  if (job->rank() == source) return absl::OkStatus();
  TY_RETURN_IF_ERROR(job->optimizer->LoadState(state));
  TY_RETURN_IF_ERROR(it->Restore(DataPositionState(position)));
  // The trainer reads its step from the optimizer when it is made.
  return job->BuildTrainer();
}

}  // namespace

absl::StatusOr<RegroupOutcome> RegroupState(JobComponents* job, Collective* collective, bool fresh) {
  if (!job->elastic() || !job->trainer || !job->train_batches) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job->id(), ": Regroup needs a training job with fault_tolerance ELASTIC"));
  }
  if (fresh && collective != job->collective) {
    return absl::InvalidArgumentError("Regroup: a fresh rank joins on the collective it was created with");
  }
  RegroupOutcome out;
  try {
    if (!fresh) TY_RETURN_IF_ERROR(job->MoveTo(collective));
    // The lowest rank at the furthest step is the source.
    TY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, GatherSteps(*job, fresh));
    const int64_t furthest = *std::max_element(steps.begin(), steps.end());
    if (furthest < 0) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job->id(), ": regrouping ", job->world_size(),
                                                        " rank(s), none of which holds the training state"));
    }
    const bool differ = std::any_of(steps.begin(), steps.end(), [&](int64_t s) { return s != furthest; });
    if (differ) {
      out.source_rank = static_cast<int>(std::find(steps.begin(), steps.end(), furthest) - steps.begin());
      const auto t0 = std::chrono::steady_clock::now();
      TY_RETURN_IF_ERROR(BroadcastState(job, out.source_rank, &out));
      TY_RETURN_IF_ERROR(CollectiveFailure(job->batches->ledger()->ShareFrom(job->collective, out.source_rank)));
      out.transfer_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
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
  for (const auto& p : job.model->parameters()) add(p);
  if (job.optimizer) {
    for (const auto& [name, t] : job.optimizer->State()) add(t);
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
