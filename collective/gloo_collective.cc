#include "collective/gloo_collective.h"

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collective/flat_buckets.h"
#include "common/signals.h"

namespace trainyard {

namespace {

// c10d's store interface over ours. c10d reports failures by exceptions;
// they surface from ProcessGroupGloo's constructor, where Create catches
// them.
class StoreAdapter : public c10d::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<trainyard::Store> store) : store_(std::move(store)) {}

#if TORCH_VERSION_MAJOR >= 2
  // LibTorch 2.x: a second handle on the same store (same keys).
  c10::intrusive_ptr<c10d::Store> clone() override {
    auto copy = c10::make_intrusive<StoreAdapter>(store_);
    copy->setTimeout(timeout_);
    return copy;
  }
#endif

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    Check(store_->Set(key, std::string(value.begin(), value.end())));
  }
  std::vector<uint8_t> get(const std::string& key) override {
    absl::StatusOr<std::string> value = store_->Get(key, Timeout());
    Check(value.status());
    return std::vector<uint8_t>(value->begin(), value->end());
  }
  int64_t add(const std::string& key, int64_t delta) override {
    absl::StatusOr<int64_t> value = store_->Add(key, delta);
    Check(value.status());
    return *value;
  }
  bool deleteKey(const std::string&) override {
    throw std::runtime_error("deleteKey is not supported by the rendezvous store");
  }
  bool check(const std::vector<std::string>& keys) override {
    absl::StatusOr<bool> present = store_->Check(keys);
    Check(present.status());
    return *present;
  }
  int64_t getNumKeys() override { throw std::runtime_error("getNumKeys is not supported by the rendezvous store"); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    Check(store_->Wait(keys, absl::FromChrono(timeout)));
  }

 private:
  absl::Duration Timeout() const { return absl::FromChrono(timeout_); }
  static void Check(const absl::Status& status) {
    if (!status.ok()) throw std::runtime_error(status.ToString());
  }
  std::shared_ptr<trainyard::Store> store_;
};

absl::Status FromTorchError(const char* what, const std::exception& e) {
  const std::string message = e.what();
  const std::string first_line = message.substr(0, message.find('\n'));
  if (absl::StrContains(message, "imed out") || absl::StrContains(message, "imeout")) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": ", first_line));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", first_line));
}

// Waits for `work` until `deadline`, in slices of the watch's poll
// interval so that an abort ends the wait at once (kAborted); the timeout
// gives kDeadlineExceeded naming `timeout`.
absl::Status AwaitWork(const char* what, c10d::Work& work, std::chrono::steady_clock::time_point deadline,
                       std::chrono::milliseconds timeout, CollectiveWatch& watch) {
  CollectiveWatch::Waiting waiting(&watch);
  const auto slice = absl::ToChronoMilliseconds(CollectiveWatch::kAbortPollInterval);
  while (true) {
    if (watch.aborted()) return watch.AbortedError(what);
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out after ", timeout.count(), " ms"));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    try {
      // c10d throws when a bounded wait ends first (older versions return
      // false); the work's own failure throws too, once it has completed.
      if (work.wait(std::max(std::min(left, slice), std::chrono::milliseconds(1)))) return absl::OkStatus();
    } catch (const std::exception& e) {
      if (!work.isCompleted()) continue;
      try {
        work.wait();
        return absl::OkStatus();
      } catch (const std::exception& failed) {
        return FromTorchError(what, failed);
      }
    }
  }
}

template <typename F>
absl::Status Run(const char* what, std::chrono::milliseconds timeout, CollectiveWatch& watch, F make_work) {
  if (watch.aborted()) return watch.AbortedError(what);
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = make_work();
  } catch (const std::exception& e) {
    return FromTorchError(what, e);
  }
  return AwaitWork(what, *work, std::chrono::steady_clock::now() + timeout, timeout, watch);
}

c10d::ReduceOp ToC10d(ReduceOp op) {
  return op == ReduceOp::kSum ? c10d::ReduceOp::SUM : op == ReduceOp::kMax ? c10d::ReduceOp::MAX : c10d::ReduceOp::MIN;
}

class GlooWork : public CollectiveWork {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout,
           std::shared_ptr<CollectiveWatch> watch)
      : work_(std::move(work)),
        timeout_(timeout),
        deadline_(std::chrono::steady_clock::now() + timeout),
        watch_(std::move(watch)) {}
  ~GlooWork() override {
    // Never leave an operation writing into a tensor its owner may free.
    if (work_) Wait().IgnoreError();
  }
  absl::Status Wait() override {
    if (!work_) return absl::FailedPreconditionError("the all-reduce was already waited for");
    c10::intrusive_ptr<c10d::Work> work = std::move(work_);
    work_.reset();
    return AwaitWork("all-reduce", *work, deadline_, timeout_, *watch_);
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  std::shared_ptr<CollectiveWatch> watch_;
};

// The result of a task on the collective's thread.
struct TaskState {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  absl::Status status;
};

class TaskWork : public CollectiveWork {
 public:
  TaskWork(std::shared_ptr<TaskState> state, std::shared_ptr<CollectiveWatch> watch)
      : state_(std::move(state)), watch_(std::move(watch)) {}
  ~TaskWork() override {
    // Never leave an operation writing into a tensor its owner may free.
    if (state_) Wait().IgnoreError();
  }
  // The task ends by its own deadline: waiting for it is bounded. An abort
  // ends the wait at once (the task's transfers may go on until their
  // deadline: its tensors are not to be used again).
  absl::Status Wait() override {
    if (!state_) return absl::FailedPreconditionError("the operation was already waited for");
    std::shared_ptr<TaskState> state = std::move(state_);
    state_.reset();
    CollectiveWatch::Waiting waiting(watch_.get());
    const auto poll = absl::ToChronoMilliseconds(CollectiveWatch::kAbortPollInterval);
    std::unique_lock<std::mutex> lock(state->mu);
    while (!state->done) {
      if (watch_->aborted()) return watch_->AbortedError("ring operation");
      state->done_cv.wait_for(lock, poll);
    }
    return state->status;
  }

 private:
  std::shared_ptr<TaskState> state_;
  std::shared_ptr<CollectiveWatch> watch_;
};

}  // namespace

struct GlooCollective::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  std::chrono::milliseconds timeout;
  int64_t bucket_bytes;
  // Shared with the works handed out, which may outlive the collective.
  std::shared_ptr<CollectiveWatch> watch = std::make_shared<CollectiveWatch>();

  // The ring operations' thread and queue (started with the first one).
  std::mutex mu;
  std::condition_variable wake;
  std::deque<std::pair<std::function<absl::Status()>, std::shared_ptr<TaskState>>> tasks;
  bool stopping = false;
  std::thread thread;
  int64_t next_sequence = 0;  // ring operations started, for their transfers' tags

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    wake.notify_all();
    if (thread.joinable()) thread.join();
  }

  std::unique_ptr<CollectiveWork> Enqueue(std::function<absl::Status()> task) {
    auto state = std::make_shared<TaskState>();
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!thread.joinable()) thread = std::thread([this] { Loop(); });
      tasks.emplace_back(std::move(task), state);
    }
    wake.notify_all();
    return std::unique_ptr<CollectiveWork>(new TaskWork(std::move(state), watch));
  }

  void Loop() {
    while (true) {
      std::pair<std::function<absl::Status()>, std::shared_ptr<TaskState>> next;
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait(lock, [&] { return stopping || !tasks.empty(); });
        if (tasks.empty()) return;
        next = std::move(tasks.front());
        tasks.pop_front();
      }
      // Pending operations of a collective being destroyed or aborted fail
      // at once.
      absl::Status status = stopping           ? absl::CancelledError("the collective is shutting down")
                            : watch->aborted() ? watch->AbortedError("ring operation")
                                               : next.first();
      std::lock_guard<std::mutex> lock(next.second->mu);
      next.second->status = std::move(status);
      next.second->done = true;
      next.second->done_cv.notify_all();
    }
  }

  // One step of a ring: send `out` to `to` and receive `in` from `from`
  // (either may be empty), waiting at most until `deadline`.
  absl::Status Exchange(const char* what, torch::Tensor out, int to, torch::Tensor in, int from, int tag,
                        std::chrono::steady_clock::time_point deadline) {
    try {
      c10::intrusive_ptr<c10d::Work> sent, received;
      std::vector<torch::Tensor> o = {out}, i = {in};
      if (in.numel() > 0) received = group->recv(i, from, tag);
      if (out.numel() > 0) sent = group->send(o, to, tag);
      // Point-to-point waits are not sliced: Gloo closes the connection
      // when a bounded wait for a transfer ends first. An abort is seen
      // between steps (and TaskWork::Wait returns at once).
      for (auto* work : {&sent, &received}) {
        if (!*work) continue;
        if (watch->aborted()) return watch->AbortedError(what);
        const auto left =
            std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                     std::chrono::milliseconds(1));
        if (!(*work)->wait(left)) {
          return absl::DeadlineExceededError(absl::StrCat(what, ": timed out after ", timeout.count(), " ms"));
        }
      }
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromTorchError(what, e);
    }
  }
};

namespace {

// Transfer tags of ring operation `sequence`, step `step` (below 4096:
// world sizes are bounded by the validator's kMaxWorkers).
int RingTag(int64_t sequence, int step) { return static_cast<int>((sequence % (1 << 18)) * 4096 + step); }

}  // namespace

std::shared_ptr<Store> GlooCollective::NewInProcessStore() { return std::make_shared<InMemoryStore>(); }

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(int rank, int world_size,
                                                                       std::shared_ptr<Store> store,
                                                                       const GlooOptions& gloo) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in [0, ", world_size, ")"));
  }
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  // A peer that reset its connection must be an error of the collective,
  // not the death of this process (Gloo's writev raises SIGPIPE).
  IgnoreBrokenPipes();
  std::unique_ptr<GlooCollective> collective(new GlooCollective);
  collective->rank_ = rank;
  collective->world_size_ = world_size;
  collective->impl_ = std::make_unique<Impl>();
  if (gloo.bucket_bytes <= 0) return absl::InvalidArgumentError("bucket_bytes must be positive");
  collective->impl_->timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(gloo.timeout));
  collective->impl_->bucket_bytes = gloo.bucket_bytes;
  try {
    auto adapter = c10::make_intrusive<StoreAdapter>(std::move(store));
    adapter->setTimeout(collective->impl_->timeout);
    auto options = c10d::ProcessGroupGloo::Options::create(collective->impl_->timeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(gloo.hostname));
    collective->impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(adapter, rank, world_size, options);
  } catch (const std::exception& e) {
    return FromTorchError("joining the Gloo group", e);
  }
  return collective;
}

GlooCollective::~GlooCollective() = default;

void GlooCollective::Abort(absl::string_view reason) { impl_->watch->Abort(reason); }

CollectiveProgress GlooCollective::Progress() const { return impl_->watch->Progress(); }

absl::Status GlooCollective::AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) {
  if (tensors.empty()) return absl::OkStatus();
  if (impl_->watch->aborted()) return impl_->watch->AbortedError("all-reduce");
  c10d::AllreduceOptions options;
  options.reduceOp = ToC10d(op);
  options.timeout = impl_->timeout;
  // c10d's list is one tensor per device, not a list of buffers: the
  // tensors go in flat buckets of at most bucket_bytes (PackFlatBuckets; a
  // large contiguous tensor is reduced in place, in bucket-sized views).
  // Every bucket's all-reduce is issued before any is waited for, so Gloo's
  // worker threads overlap one bucket's transfer with another's reduction.
  std::vector<FlatBucket> buckets;
  std::vector<std::vector<torch::Tensor>> inputs;  // alive until the works end
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  try {
    buckets = PackFlatBuckets(tensors, impl_->bucket_bytes);
    inputs.reserve(buckets.size());
    for (FlatBucket& b : buckets) {
      inputs.push_back({b.flat});
      works.push_back(impl_->group->allreduce(inputs.back(), options));
    }
  } catch (const std::exception& e) {
    return FromTorchError("all-reduce", e);
  }
  const auto deadline = std::chrono::steady_clock::now() + impl_->timeout;
  absl::Status status;
  for (auto& work : works) {
    absl::Status s = AwaitWork("all-reduce", *work, deadline, impl_->timeout, *impl_->watch);
    if (!s.ok() && status.ok()) status = s;
  }
  if (!status.ok()) return status;
  for (const FlatBucket& b : buckets) UnpackFlatBucket(b);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> GlooCollective::StartAllReduce(torch::Tensor tensor, ReduceOp op) {
  if (!tensor.is_contiguous()) return absl::InvalidArgumentError("StartAllReduce takes a contiguous tensor");
  if (impl_->watch->aborted()) return impl_->watch->AbortedError("all-reduce");
  c10d::AllreduceOptions options;
  options.reduceOp = ToC10d(op);
  options.timeout = impl_->timeout;
  try {
    std::vector<torch::Tensor> one = {tensor.view({-1})};
    return std::unique_ptr<CollectiveWork>(
        new GlooWork(impl_->group->allreduce(one, options), impl_->timeout, impl_->watch));
  } catch (const std::exception& e) {
    return FromTorchError("all-reduce", e);
  }
}

absl::Status GlooCollective::AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) {
  std::vector<torch::Tensor> in = {input.contiguous()};
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < world_size_; ++r) out[0].push_back(torch::empty_like(in[0]));
  c10d::AllgatherOptions options;
  options.timeout = impl_->timeout;
  absl::Status status =
      Run("all-gather", impl_->timeout, *impl_->watch, [&] { return impl_->group->allgather(out, in, options); });
  if (!status.ok()) return status;
  *outputs = std::move(out[0]);
  return absl::OkStatus();
}

absl::Status GlooCollective::Broadcast(std::vector<torch::Tensor>& tensors, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " out of range"));
  }
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = impl_->timeout;
  absl::Status status;
  for (torch::Tensor& t : tensors) {
    std::vector<torch::Tensor> one = {t};
    status = Run("broadcast", impl_->timeout, *impl_->watch, [&] { return impl_->group->broadcast(one, options); });
    if (!status.ok()) return status;
  }
  return status;
}

absl::Status GlooCollective::BroadcastTo(std::vector<torch::Tensor>& tensors, int root,
                                         const std::vector<int>& receivers) {
  if (absl::Status s = CheckBroadcastTo(root, receivers, world_size_); !s.ok()) return s;
  for (const torch::Tensor& t : tensors) {
    if (!t.is_contiguous()) return absl::InvalidArgumentError("BroadcastTo: tensors must be contiguous");
  }
  const int64_t sequence = impl_->next_sequence++;
  const bool receives = std::find(receivers.begin(), receivers.end(), rank_) != receivers.end();
  if (rank_ != root && !receives) return absl::OkStatus();
  Impl* impl = impl_.get();
  const int rank = rank_;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work =
      impl_->Enqueue([impl, tensors, root, receivers, sequence, rank]() -> absl::Status {
        const auto deadline = std::chrono::steady_clock::now() + impl->timeout;
        for (size_t i = 0; i < tensors.size(); ++i) {
          const int tag = RingTag(sequence, static_cast<int>(i % 4096));
          if (tensors[i].numel() == 0) continue;
          for (int to : receivers) {
            if (rank != root && rank != to) continue;
            absl::Status s = rank == root
                                 ? impl->Exchange("broadcast", tensors[i], to, torch::empty({0}), -1, tag, deadline)
                                 : impl->Exchange("broadcast", torch::empty({0}), -1, tensors[i], root, tag, deadline);
            if (!s.ok()) return s;
          }
        }
        return absl::OkStatus();
      });
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

absl::Status GlooCollective::Barrier() {
  c10d::BarrierOptions options;
  options.timeout = impl_->timeout;
  return Run("barrier", impl_->timeout, *impl_->watch, [&] { return impl_->group->barrier(options); });
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> GlooCollective::StartReduceScatter(torch::Tensor input,
                                                                                   std::vector<int64_t> counts,
                                                                                   torch::Tensor output, ReduceOp op) {
  if (absl::Status s = CheckReduceScatter(input, counts, output, rank_, world_size_); !s.ok()) return s;
  const int64_t sequence = impl_->next_sequence++;
  Impl* impl = impl_.get();
  const int rank = rank_, world = world_size_;
  return impl_->Enqueue([impl, input, counts, output, op, sequence, rank, world]() -> absl::Status {
    const auto deadline = std::chrono::steady_clock::now() + impl->timeout;
    const std::vector<int64_t> offsets = ShardOffsets(counts);
    auto shard = [&](int r) { return input.narrow(0, offsets[r], counts[r]); };
    if (world > 1) {
      const int64_t largest = *std::max_element(counts.begin(), counts.end());
      torch::Tensor scratch = torch::empty({largest}, input.options());
      // Step s: send the partial sum of shard r-s-1, receive that of shard
      // r-s-2 and add this rank's part; after W-1 steps shard r is whole here.
      for (int step = 0; step < world - 1; ++step) {
        const int send = ((rank - step - 1) % world + world) % world;
        const int recv = ((rank - step - 2) % world + world) % world;
        torch::Tensor in = scratch.narrow(0, 0, counts[recv]);
        absl::Status s = impl->Exchange("reduce-scatter", shard(send), (rank + 1) % world, in,
                                        (rank + world - 1) % world, RingTag(sequence, step), deadline);
        if (!s.ok()) return s;
        torch::Tensor acc = shard(recv);
        if (op == ReduceOp::kSum) {
          acc.add_(in);
        } else {
          acc.copy_(op == ReduceOp::kMax ? torch::maximum(acc, in) : torch::minimum(acc, in));
        }
      }
    }
    output.copy_(shard(rank));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> GlooCollective::StartAllGatherV(torch::Tensor input,
                                                                                std::vector<int64_t> counts,
                                                                                torch::Tensor output) {
  if (absl::Status s = CheckAllGatherV(input, counts, output, rank_, world_size_); !s.ok()) return s;
  const int64_t sequence = impl_->next_sequence++;
  Impl* impl = impl_.get();
  const int rank = rank_, world = world_size_;
  return impl_->Enqueue([impl, input, counts, output, sequence, rank, world]() -> absl::Status {
    const auto deadline = std::chrono::steady_clock::now() + impl->timeout;
    const std::vector<int64_t> offsets = ShardOffsets(counts);
    auto shard = [&](int r) { return output.narrow(0, offsets[r], counts[r]); };
    shard(rank).copy_(input);
    // Step s: pass on shard r-s, receive shard r-s-1.
    for (int step = 0; step < world - 1; ++step) {
      const int send = ((rank - step) % world + world) % world;
      const int recv = ((rank - step - 1) % world + world) % world;
      absl::Status s = impl->Exchange("all-gather", shard(send), (rank + 1) % world, shard(recv),
                                      (rank + world - 1) % world, RingTag(sequence, step), deadline);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

absl::Status GlooCollective::ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts,
                                           torch::Tensor output, ReduceOp op) {
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work = StartReduceScatter(input, counts, output, op);
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

absl::Status GlooCollective::AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) {
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work = StartAllGatherV(input, counts, output);
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

}  // namespace trainyard
