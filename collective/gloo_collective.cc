#include "collective/gloo_collective.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainyard {

struct GlooStore {
  c10::intrusive_ptr<c10d::Store> store;
};

struct GlooCollective::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  std::chrono::milliseconds timeout;
};

namespace {

absl::Status FromTorchError(const char* what, const std::exception& e) {
  const std::string message = e.what();
  const std::string first_line = message.substr(0, message.find('\n'));
  if (absl::StrContains(message, "imed out") || absl::StrContains(message, "imeout")) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": ", first_line));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", first_line));
}

template <typename F>
absl::Status Run(const char* what, std::chrono::milliseconds timeout, F make_work) {
  try {
    c10::intrusive_ptr<c10d::Work> work = make_work();
    if (!work->wait(timeout)) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out after ", timeout.count(), " ms"));
    }
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromTorchError(what, e);
  }
}

}  // namespace

std::shared_ptr<GlooStore> GlooCollective::NewInProcessStore() {
  auto store = std::make_shared<GlooStore>();
  store->store = c10::make_intrusive<c10d::HashStore>();
  return store;
}

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(
    int rank, int world_size, std::shared_ptr<GlooStore> store, const std::string& hostname,
    absl::Duration timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in [0, ", world_size, ")"));
  }
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  std::unique_ptr<GlooCollective> collective(new GlooCollective);
  collective->rank_ = rank;
  collective->world_size_ = world_size;
  collective->impl_ = std::make_unique<Impl>();
  collective->impl_->timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
  try {
    store->store->setTimeout(collective->impl_->timeout);
    auto options = c10d::ProcessGroupGloo::Options::create(collective->impl_->timeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
    collective->impl_->group =
        c10::make_intrusive<c10d::ProcessGroupGloo>(store->store, rank, world_size, options);
  } catch (const std::exception& e) {
    return FromTorchError("joining the Gloo group", e);
  }
  return collective;
}

GlooCollective::~GlooCollective() = default;

absl::Status GlooCollective::AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) {
  if (tensors.empty()) return absl::OkStatus();
  c10d::AllreduceOptions options;
  options.reduceOp = op == ReduceOp::kSum   ? c10d::ReduceOp::SUM
                     : op == ReduceOp::kMax ? c10d::ReduceOp::MAX
                                            : c10d::ReduceOp::MIN;
  options.timeout = impl_->timeout;
  // c10d's list is one tensor per device, not a list of buffers: flatten
  // the tensors of each dtype into one buffer, reduce it, copy back.
  std::map<c10::ScalarType, std::vector<torch::Tensor*>> by_type;
  for (torch::Tensor& t : tensors) by_type[t.scalar_type()].push_back(&t);
  for (auto& [type, group] : by_type) {
    std::vector<torch::Tensor> flat_parts;
    for (torch::Tensor* t : group) flat_parts.push_back(t->reshape({-1}));
    std::vector<torch::Tensor> buffer = {torch::cat(flat_parts)};
    absl::Status status =
        Run("all-reduce", impl_->timeout, [&] { return impl_->group->allreduce(buffer, options); });
    if (!status.ok()) return status;
    int64_t offset = 0;
    for (torch::Tensor* t : group) {
      const int64_t n = t->numel();
      t->copy_(buffer[0].narrow(0, offset, n).view(t->sizes()));
      offset += n;
    }
  }
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
    status = Run("broadcast", impl_->timeout, [&] { return impl_->group->broadcast(one, options); });
    if (!status.ok()) return status;
  }
  return status;
}

absl::Status GlooCollective::Barrier() {
  c10d::BarrierOptions options;
  options.timeout = impl_->timeout;
  return Run("barrier", impl_->timeout, [&] { return impl_->group->barrier(options); });
}

}  // namespace trainyard
