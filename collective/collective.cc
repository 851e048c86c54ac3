#include "collective/collective.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

CollectiveWatch::Waiting::Waiting(CollectiveWatch* watch) : watch_(watch) {
  if (watch_->waiters_.fetch_add(1) == 0) watch_->last_event_ns_.store(NowNanos());
}

CollectiveWatch::Waiting::~Waiting() {
  watch_->completed_.fetch_add(1);
  watch_->last_event_ns_.store(NowNanos());
  watch_->waiters_.fetch_sub(1);
}

int64_t CollectiveWatch::NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

CollectiveProgress CollectiveWatch::Progress() const {
  CollectiveProgress p;
  p.completed = completed_.load();
  p.waiting = waiters_.load() > 0;
  if (p.waiting) p.stalled = absl::Nanoseconds(std::max<int64_t>(NowNanos() - last_event_ns_.load(), 0));
  p.aborted = aborted();
  return p;
}

void CollectiveWatch::Abort(absl::string_view reason) {
  {
    MutexLock lock(&mu_);
    if (aborted_.load()) return;
    reason_ = std::string(reason);
  }
  aborted_.store(true, std::memory_order_release);
}

absl::Status CollectiveWatch::AbortedError(absl::string_view what) const {
  MutexLock lock(&mu_);
  return absl::AbortedError(absl::StrCat(what, ": the collective was aborted: ", reason_));
}

absl::Status CollectiveFailure(const absl::Status& s) {
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
    return absl::AbortedError(absl::StrCat("collective failed (a peer left or stalled): ", s.message()));
  }
  return s;
}

namespace {

absl::Status CheckCounts(const char* what, const std::vector<int64_t>& counts, int world_size, int64_t* total) {
  if (static_cast<int>(counts.size()) != world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", counts.size(), " shard counts for ", world_size, " ranks"));
  }
  *total = 0;
  for (int64_t c : counts) {
    if (c < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a negative shard count in [", absl::StrJoin(counts, ", "), "]"));
    *total += c;
  }
  return absl::OkStatus();
}

absl::Status CheckFlat(const char* what, const char* name, const torch::Tensor& t, int64_t numel) {
  if (!t.defined() || t.dim() != 1 || !t.is_contiguous() || t.numel() != numel) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " must be a contiguous 1-D tensor of ", numel,
                                                   " elements; got ", t.defined() ? t.numel() : 0, " in ",
                                                   t.defined() ? t.dim() : 0, " dimension(s)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> ShardOffsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

absl::Status CheckReduceScatter(const torch::Tensor& input, const std::vector<int64_t>& counts,
                                const torch::Tensor& output, int rank, int world_size) {
  int64_t total;
  if (absl::Status s = CheckCounts("reduce-scatter", counts, world_size, &total); !s.ok()) return s;
  if (absl::Status s = CheckFlat("reduce-scatter", "input", input, total); !s.ok()) return s;
  if (absl::Status s = CheckFlat("reduce-scatter", "output", output, counts[rank]); !s.ok()) return s;
  if (output.scalar_type() != input.scalar_type() || output.device() != input.device()) {
    return absl::InvalidArgumentError("reduce-scatter: input and output differ in dtype or device");
  }
  // In place (output is input's own shard) or apart.
  const auto* in = static_cast<const char*>(input.data_ptr());
  const auto* out = static_cast<const char*>(output.data_ptr());
  const int64_t item = static_cast<int64_t>(input.element_size());
  const char* own = in + ShardOffsets(counts)[rank] * item;
  const bool apart = out + output.numel() * item <= in || out >= in + input.numel() * item;
  if (!apart && out != own && output.numel() > 0) {
    return absl::InvalidArgumentError(
        "reduce-scatter: output overlaps input other than as this rank's shard of it (in place)");
  }
  return absl::OkStatus();
}

absl::Status CheckAllGatherV(const torch::Tensor& input, const std::vector<int64_t>& counts,
                             const torch::Tensor& output, int rank, int world_size) {
  int64_t total;
  if (absl::Status s = CheckCounts("all-gather", counts, world_size, &total); !s.ok()) return s;
  if (absl::Status s = CheckFlat("all-gather", "input", input, counts[rank]); !s.ok()) return s;
  if (absl::Status s = CheckFlat("all-gather", "output", output, total); !s.ok()) return s;
  if (output.scalar_type() != input.scalar_type() || output.device() != input.device()) {
    return absl::InvalidArgumentError("all-gather: input and output differ in dtype or device");
  }
  return absl::OkStatus();
}

absl::Status Collective::ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                                       ReduceOp op) {
  if (absl::Status s = CheckReduceScatter(input, counts, output, rank(), world_size()); !s.ok()) return s;
  std::vector<torch::Tensor> all = {input};
  if (absl::Status s = AllReduce(all, op); !s.ok()) return s;
  output.copy_(input.narrow(0, ShardOffsets(counts)[rank()], counts[rank()]));
  return absl::OkStatus();
}

absl::Status CheckBroadcastTo(int root, const std::vector<int>& receivers, int world_size) {
  std::vector<bool> seen(static_cast<size_t>(std::max(world_size, 0)), false);
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not in [0, ", world_size, ")"));
  }
  seen[static_cast<size_t>(root)] = true;
  for (int r : receivers) {
    if (r < 0 || r >= world_size || seen[static_cast<size_t>(r)]) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast receiver ", r, " is out of [0, ", world_size,
                                                     "), the root (", root, ") or named twice"));
    }
    seen[static_cast<size_t>(r)] = true;
  }
  return absl::OkStatus();
}

absl::Status Collective::BroadcastTo(std::vector<torch::Tensor>& tensors, int root, const std::vector<int>& receivers) {
  if (absl::Status s = CheckBroadcastTo(root, receivers, world_size()); !s.ok()) return s;
  if (rank() == root || std::find(receivers.begin(), receivers.end(), rank()) != receivers.end()) {
    return Broadcast(tensors, root);
  }
  std::vector<torch::Tensor> copies;
  for (const torch::Tensor& t : tensors) copies.push_back(t.clone());
  return Broadcast(copies, root);
}

absl::Status Collective::AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) {
  if (absl::Status s = CheckAllGatherV(input, counts, output, rank(), world_size()); !s.ok()) return s;
  int64_t largest = 0;
  for (int64_t c : counts) largest = std::max(largest, c);
  torch::Tensor padded = torch::zeros({largest}, input.options());
  padded.narrow(0, 0, counts[rank()]).copy_(input);
  std::vector<torch::Tensor> gathered;
  if (absl::Status s = AllGather(padded, &gathered); !s.ok()) return s;
  const std::vector<int64_t> offsets = ShardOffsets(counts);
  for (int r = 0; r < world_size(); ++r) {
    output.narrow(0, offsets[r], counts[r]).copy_(gathered[r].narrow(0, 0, counts[r]));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
