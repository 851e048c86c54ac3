#include "trainer/parameter_gatherer.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard {

namespace {

// `status` with the unit it was gathering named, its code kept.
absl::Status Named(const absl::Status& status, size_t unit) {
  return absl::Status(status.code(), absl::StrCat("all-gather of parameter unit ", unit, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterGatherer>> ParameterGatherer::Create(NamedTensors params,
                                                                             std::vector<std::vector<size_t>> units,
                                                                             std::vector<size_t> bounds,
                                                                             Collective* collective, int prefetch) {
  const int world = collective->world_size();
  if (prefetch < 1) return absl::InvalidArgumentError(absl::StrCat("parameter gatherer: prefetch ", prefetch, " < 1"));
  if (bounds.size() != static_cast<size_t>(world) + 1 || bounds.front() != 0 || bounds.back() != params.size() ||
      !std::is_sorted(bounds.begin(), bounds.end())) {
    return absl::InvalidArgumentError(absl::StrCat("parameter gatherer: ", bounds.size(), " shard bounds for ", world,
                                                   " ranks and ", params.size(), " parameters"));
  }
  std::vector<int> seen(params.size(), 0);
  std::unique_ptr<ParameterGatherer> g(new ParameterGatherer);
  for (size_t k = 0; k < units.size(); ++k) {
    Unit unit;
    unit.params = std::move(units[k]);
    std::sort(unit.params.begin(), unit.params.end());
    unit.counts.assign(world, 0);
    for (size_t i : unit.params) {
      if (i >= params.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter gatherer: unit ", k, " names parameter ", i, " of ", params.size()));
      }
      if (seen[i]++ > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter gatherer: parameter ", params[i].first, " is in more than one unit"));
      }
      const torch::Tensor& p = params[i].second;
      if (!p.is_contiguous() || p.scalar_type() != params[0].second.scalar_type()) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter gatherer: parameter ", params[i].first, " is not contiguous or not of one dtype"));
      }
      const int owner = static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), i) - bounds.begin()) - 1;
      unit.counts[owner] += p.numel();
      unit.total += p.numel();
    }
    g->units_.push_back(std::move(unit));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (seen[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter gatherer: parameter ", params[i].first, " is in no unit"));
    }
  }
  g->params_ = std::move(params);
  g->bounds_ = std::move(bounds);
  g->collective_ = collective;
  g->slots_.resize(static_cast<size_t>(prefetch));
  g->started_ = g->done_ = g->units_.size();  // nothing pending
  return g;
}

ParameterGatherer::~ParameterGatherer() { Abandon(); }

absl::Status ParameterGatherer::Start() {
  if (!error_.ok()) return error_;
  if (pending()) return absl::FailedPreconditionError("parameter gatherer: Start with gathers pending");
  started_ = done_ = 0;
  while (started_ < units_.size() && started_ < slots_.size()) {
    if (absl::Status s = StartNext(); !s.ok()) {
      Fail(s);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterGatherer::StartNext() {
  torch::NoGradGuard no_grad;
  const Unit& unit = units_[started_];
  Slot& slot = slots_[started_ % slots_.size()];
  const int rank = collective_->rank();
  const auto options = params_[unit.params[0]].second.options();
  if (!slot.receive.defined() || slot.receive.numel() < unit.total) slot.receive = torch::empty({unit.total}, options);
  if (!slot.send.defined() || slot.send.numel() < unit.counts[rank]) {
    slot.send = torch::empty({std::max<int64_t>(unit.counts[rank], 1)}, options);
  }
  // This rank's parameters of the unit, end to end.
  int64_t at = 0;
  for (size_t i : unit.params) {
    if (i < bounds_[rank] || i >= bounds_[rank + 1]) continue;
    const torch::Tensor& p = params_[i].second;
    slot.send.narrow(0, at, p.numel()).copy_(p.view({-1}));
    at += p.numel();
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work = collective_->StartAllGatherV(
      slot.send.narrow(0, 0, unit.counts[rank]), unit.counts, slot.receive.narrow(0, 0, unit.total));
  if (!work.ok()) return Named(work.status(), started_);
  slot.work = std::move(*work);
  ++started_;
  return absl::OkStatus();
}

absl::Status ParameterGatherer::CompleteNext() {
  torch::NoGradGuard no_grad;
  const Unit& unit = units_[done_];
  Slot& slot = slots_[done_ % slots_.size()];
  absl::Status s = slot.work->Wait();
  slot.work.reset();
  if (!s.ok()) return Named(s, done_);
  // The others' parameters from the gathered buffer (the unit's, in order).
  const int rank = collective_->rank();
  int64_t at = 0;
  for (size_t i : unit.params) {
    const torch::Tensor& p = params_[i].second;
    if (i < bounds_[rank] || i >= bounds_[rank + 1]) p.view({-1}).copy_(slot.receive.narrow(0, at, p.numel()));
    at += p.numel();
  }
  ++done_;
  return absl::OkStatus();
}

absl::Status ParameterGatherer::Advance(size_t last) {
  if (!error_.ok()) return error_;
  const auto start = std::chrono::steady_clock::now();
  struct Timer {
    std::chrono::steady_clock::time_point start;
    double* seconds;
    ~Timer() { *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  } timer{start, &wait_seconds_};
  last = std::min(last, units_.size() - 1);
  while (done_ <= last && done_ < units_.size()) {
    absl::Status s = started_ > done_ ? absl::OkStatus() : StartNext();
    if (s.ok()) s = CompleteNext();
    // Keep `prefetch` units in flight.
    while (s.ok() && started_ < units_.size() && started_ < done_ + slots_.size()) s = StartNext();
    if (!s.ok()) {
      Fail(s);
      return s;
    }
  }
  if (done_ == units_.size()) stale_ = false;  // every unit whole again
  return absl::OkStatus();
}

void ParameterGatherer::Before(int u) {
  if (u < 0 || done_ > static_cast<size_t>(u) || units_.empty()) {
    if (!error_.ok()) throw std::runtime_error(error_.ToString());
    return;
  }
  if (absl::Status s = Advance(static_cast<size_t>(u)); !s.ok()) throw std::runtime_error(s.ToString());
}

absl::Status ParameterGatherer::Finish() {
  if (units_.empty() || !pending()) return error_;
  return Advance(units_.size() - 1);
}

void ParameterGatherer::Fail(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
  Abandon();
}

void ParameterGatherer::Abandon() {
  for (Slot& slot : slots_) {
    // A gather in flight writes into its buffers until it ends.
    if (slot.work != nullptr) slot.work->Wait().IgnoreError();
    slot.work.reset();
  }
  if (pending()) stale_ = true;
  started_ = done_ = units_.size();
}

double ParameterGatherer::TakeWaitSeconds() { return std::exchange(wait_seconds_, 0.0); }

}  // namespace trainyard
