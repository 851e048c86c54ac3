#include "trainer/parameter_gatherer.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/parameter_storage.h"

namespace trainyard {

namespace {

// `status` with the unit it was gathering named, its code kept.
absl::Status Named(const absl::Status& status, int unit) {
  return absl::Status(status.code(), absl::StrCat("all-gather of parameter unit ", unit, ": ", status.message()));
}

}  // namespace

// Runs after autograd has accumulated a parameter's gradient.
class ParameterGatherer::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(ParameterGatherer* gatherer, size_t param) : gatherer_(gatherer), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    gatherer_->GradientReady(param_);
    return outputs;
  }

 private:
  ParameterGatherer* gatherer_;
  size_t param_;
};

absl::StatusOr<std::unique_ptr<ParameterGatherer>> ParameterGatherer::Create(
    NamedTensors params, std::vector<std::vector<size_t>> units, std::vector<size_t> bounds, Collective* collective,
    int prefetch, bool shard_parameters, int64_t keep_elements) {
  const int world = collective->world_size();
  if (prefetch < 1) return absl::InvalidArgumentError(absl::StrCat("parameter gatherer: prefetch ", prefetch, " < 1"));
  if (bounds.size() != static_cast<size_t>(world) + 1 || bounds.front() != 0 || bounds.back() != params.size() ||
      !std::is_sorted(bounds.begin(), bounds.end())) {
    return absl::InvalidArgumentError(absl::StrCat("parameter gatherer: ", bounds.size(), " shard bounds for ", world,
                                                   " ranks and ", params.size(), " parameters"));
  }
  std::unique_ptr<ParameterGatherer> g(new ParameterGatherer);
  g->bounds_ = std::move(bounds);
  g->collective_ = collective;
  g->shard_parameters_ = shard_parameters;
  g->keep_elements_ = keep_elements;
  TY_RETURN_IF_ERROR(g->AddUnits(params, std::move(units)));
  for (size_t i = 0; i < params.size(); ++i) {
    if (g->unit_of_[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter gatherer: parameter ", params[i].first, " is in no unit"));
    }
    // A parameter released when the model was built (its storage holds
    // nothing) gets back the bytes its elements need.
    const torch::Tensor& p = params[i].second;
    g->nbytes_.push_back(StorageReleased(p) ? static_cast<size_t>(p.numel()) * p.element_size() : p.storage().nbytes());
  }
  g->params_ = std::move(params);
  g->slots_.resize(static_cast<size_t>(prefetch));
  g->whole_.assign(g->units_.size(), 1);
  g->ready_.assign(g->units_.size(), 0);
  g->forward_at_.assign(g->units_.size(), -1);
  g->backward_at_.assign(g->units_.size(), -1);
  TY_RETURN_IF_ERROR(g->CountReleasedParameters());
  if (shard_parameters) {
    for (size_t i = 0; i < g->params_.size(); ++i) {
      std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(g->params_[i].second);
      g->hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(g.get(), i)));
      g->accumulators_.push_back(std::move(acc));
    }
  }
  return g;
}

absl::Status ParameterGatherer::AddUnits(const NamedTensors& params, std::vector<std::vector<size_t>> units) {
  const int world = collective_->world_size();
  unit_of_.assign(params.size(), -1);
  std::set<const void*> storages;
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
      if (unit_of_[i] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter gatherer: parameter ", params[i].first, " is in more than one unit"));
      }
      unit_of_[i] = static_cast<int>(k);
      const torch::Tensor& p = params[i].second;
      if (!p.is_contiguous() || p.scalar_type() != params[0].second.scalar_type()) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter gatherer: parameter ", params[i].first, " is not contiguous or not of one dtype"));
      }
      if (shard_parameters_ && (!p.requires_grad() || !storages.insert(p.storage().unsafeGetStorageImpl()).second)) {
        return absl::InvalidArgumentError(absl::StrCat("parameter gatherer: parameter ", params[i].first,
                                                       " does not require grad or shares another's storage; "
                                                       "PARAMETERS sharding releases each parameter's own memory"));
      }
      const int owner = static_cast<int>(std::upper_bound(bounds_.begin(), bounds_.end(), i) - bounds_.begin()) - 1;
      unit.counts[owner] += p.numel();
      unit.total += p.numel();
      if (owner != collective_->rank()) unit.others += p.numel();
    }
    others_elements_ += unit.others;
    units_.push_back(std::move(unit));
  }
  return absl::OkStatus();
}

absl::Status ParameterGatherer::CountReleasedParameters() {
  // Parameters released before (a model built holding this rank's own
  // only) leave the gatherer as ReleaseAll would: no unit counts as whole,
  // so every rank's first gathers are the same collectives.
  gathered_elements_ = others_elements_;
  bool released = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!StorageReleased(params_[i].second)) continue;
    if (!shard_parameters_ || Mine(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter gatherer: parameter ", params_[i].first, " holds no memory, and ",
                       Mine(i) ? "it is this rank's own" : "only PARAMETERS sharding gathers it"));
    }
    released = true;
    gathered_elements_ -= params_[i].second.numel();
  }
  if (released) whole_.assign(units_.size(), 0);
  peak_gathered_ = gathered_elements_;
  return absl::OkStatus();
}

ParameterGatherer::~ParameterGatherer() {
  Abandon();
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

bool ParameterGatherer::Mine(size_t i) const {
  const size_t rank = static_cast<size_t>(collective_->rank());
  return i >= bounds_[rank] && i < bounds_[rank + 1];
}

void ParameterGatherer::Schedule(std::vector<int> forward, std::vector<int> backward) {
  std::fill(forward_at_.begin(), forward_at_.end(), -1);
  std::fill(backward_at_.begin(), backward_at_.end(), -1);
  schedule_.clear();
  for (int u : forward) {
    forward_at_[u] = static_cast<int>(schedule_.size());
    schedule_.push_back(u);
  }
  for (int u : backward) {
    backward_at_[u] = static_cast<int>(schedule_.size());
    schedule_.push_back(u);
  }
  started_ = done_ = 0;
}

absl::Status ParameterGatherer::StartFirst() {
  while (started_ < schedule_.size() && started_ < slots_.size()) {
    if (absl::Status s = StartNext(); !s.ok()) {
      Fail(s);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterGatherer::Start() {
  if (!error_.ok()) return error_;
  if (pending()) return absl::FailedPreconditionError("parameter gatherer: Start with gathers pending");
  std::vector<int> all;
  for (size_t u = 0; u < units_.size(); ++u) all.push_back(static_cast<int>(u));
  Schedule(std::move(all), {});
  std::fill(whole_.begin(), whole_.end(), 0);
  return StartFirst();
}

absl::Status ParameterGatherer::BeginPass() {
  if (!error_.ok()) return error_;
  if (!shard_parameters_) return absl::FailedPreconditionError("parameter gatherer: BeginPass without PARAMETERS");
  Abandon();
  const int n = static_cast<int>(units_.size());
  std::vector<int> forward, backward;
  for (int u = 0; u < n; ++u) {
    if (!whole_[u]) forward.push_back(u);
  }
  for (int u = n - 2; u >= 1; --u) backward.push_back(u);
  Schedule(std::move(forward), std::move(backward));
  std::fill(ready_.begin(), ready_.end(), 0);
  in_pass_ = true;
  return StartFirst();
}

absl::Status ParameterGatherer::StartNext() {
  torch::NoGradGuard no_grad;
  const int u = schedule_[started_];
  const Unit& unit = units_[u];
  Slot& slot = slots_[started_ % slots_.size()];
  const int rank = collective_->rank();
  const auto options = params_[unit.params[0]].second.options().requires_grad(false);
  // A large unit's buffers are its own, freed when it completes; a small
  // one's are kept (and grown) for the next.
  slot.transient = unit.total > keep_elements_;
  if (slot.transient || !slot.receive.defined() || slot.receive.numel() < unit.total) {
    slot.receive = torch::empty({unit.total}, options);
  }
  if (slot.transient || !slot.send.defined() || slot.send.numel() < unit.counts[rank]) {
    slot.send = torch::empty({std::max<int64_t>(unit.counts[rank], 1)}, options);
  }
  // This rank's parameters of the unit, end to end.
  int64_t at = 0;
  for (size_t i : unit.params) {
    if (!Mine(i)) continue;
    const torch::Tensor& p = params_[i].second;
    slot.send.narrow(0, at, p.numel()).copy_(p.detach().view({-1}));
    at += p.numel();
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work = collective_->StartAllGatherV(
      slot.send.narrow(0, 0, unit.counts[rank]), unit.counts, slot.receive.narrow(0, 0, unit.total));
  if (!work.ok()) return Named(work.status(), u);
  slot.work = std::move(*work);
  ++started_;
  return absl::OkStatus();
}

absl::Status ParameterGatherer::CompleteNext() {
  torch::NoGradGuard no_grad;
  const int u = schedule_[done_];
  const Unit& unit = units_[u];
  Slot& slot = slots_[done_ % slots_.size()];
  absl::Status s = slot.work->Wait();
  slot.work.reset();
  if (!s.ok()) return Named(s, u);
  // The others' parameters from the gathered buffer (the unit's, in
  // order), into their storage (given back first if it was released),
  // through data(): the version counters autograd checks stay as they are.
  int64_t at = 0;
  for (size_t i : unit.params) {
    const torch::Tensor& p = params_[i].second;
    if (!Mine(i)) {
      if (shard_parameters_ && StorageReleased(p)) {
        if (absl::Status restored = RestoreStorage(p, nbytes_[i]); !restored.ok()) {
          return Named(absl::Status(restored.code(), absl::StrCat(params_[i].first, ": ", restored.message())), u);
        }
        gathered_elements_ += p.numel();
      }
      p.data().view({-1}).copy_(slot.receive.narrow(0, at, p.numel()));
    }
    at += p.numel();
  }
  if (slot.transient) slot.send = slot.receive = torch::Tensor();
  whole_[u] = 1;
  peak_gathered_ = std::max(peak_gathered_, gathered_elements_);
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
  last = std::min(last, schedule_.size() - 1);
  while (done_ <= last && done_ < schedule_.size()) {
    absl::Status s = started_ > done_ ? absl::OkStatus() : StartNext();
    if (s.ok()) s = CompleteNext();
    // Keep `prefetch` units in flight.
    while (s.ok() && started_ < schedule_.size() && started_ < done_ + slots_.size()) s = StartNext();
    if (!s.ok()) {
      Fail(s);
      return s;
    }
  }
  if (!pending()) stale_ = false;  // every scheduled unit whole again
  return absl::OkStatus();
}

void ParameterGatherer::AdvanceOrThrow(int entry) {
  if (entry < 0 || done_ > static_cast<size_t>(entry)) {
    if (!error_.ok()) throw std::runtime_error(error_.ToString());
    return;
  }
  if (absl::Status s = Advance(static_cast<size_t>(entry)); !s.ok()) throw std::runtime_error(s.ToString());
}

void ParameterGatherer::Before(int u) {
  if (u < 0 || static_cast<size_t>(u) >= units_.size()) return;
  AdvanceOrThrow(forward_at_[u]);
  ThrowIfReleased(u);
}

void ParameterGatherer::BeforeBackward(int u) {
  if (u < 0 || static_cast<size_t>(u) >= units_.size()) return;
  AdvanceOrThrow(backward_at_[u]);
  ThrowIfReleased(u);
}

void ParameterGatherer::ThrowIfReleased(int u) const {
  // A pass outside BeginPass (evaluation without GatherAll) would read
  // freed memory: refused.
  if (shard_parameters_ && !whole_[u]) {
    throw std::runtime_error(absl::StrCat("parameter unit ", u,
                                          " is released (this rank holds only its shard of the parameters); "
                                          "gather them first"));
  }
}

void ParameterGatherer::After(int u) {
  const int n = static_cast<int>(units_.size());
  if (!in_pass_ || u <= 0 || u >= n - 1) return;
  Release(u);
}

void ParameterGatherer::GradientReady(size_t param) {
  if (!in_pass_) return;
  const int u = unit_of_[param];
  if (u == 0) return;
  if (++ready_[u] == static_cast<int>(units_[u].params.size())) Release(u);
}

void ParameterGatherer::Release(int u) {
  for (size_t i : units_[u].params) {
    if (Mine(i) || StorageReleased(params_[i].second)) continue;
    ReleaseStorage(params_[i].second);
    gathered_elements_ -= params_[i].second.numel();
  }
  whole_[u] = 0;
}

void ParameterGatherer::ReleaseAll() {
  Abandon();
  in_pass_ = false;
  if (!shard_parameters_) return;
  for (size_t u = 0; u < units_.size(); ++u) Release(static_cast<int>(u));
}

absl::Status ParameterGatherer::GatherAll() {
  if (!error_.ok()) return error_;
  Abandon();
  in_pass_ = false;
  std::vector<int> missing;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!whole_[u]) missing.push_back(static_cast<int>(u));
  }
  if (missing.empty()) return absl::OkStatus();
  Schedule(std::move(missing), {});
  return Advance(schedule_.size() - 1);
}

absl::Status ParameterGatherer::Finish() {
  if (!pending()) return error_;
  return Advance(schedule_.size() - 1);
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
    if (slot.transient) slot.send = slot.receive = torch::Tensor();
  }
  if (pending() && !shard_parameters_) stale_ = true;
  started_ = done_ = schedule_.size();
}

int64_t ParameterGatherer::buffer_elements() const {
  int64_t n = 0;
  for (const Slot& slot : slots_) {
    for (const torch::Tensor* t : {&slot.send, &slot.receive}) n += t->defined() ? t->numel() : 0;
  }
  return n;
}

double ParameterGatherer::TakeWaitSeconds() { return std::exchange(wait_seconds_, 0.0); }

int64_t ParameterGatherer::TakePeakGatheredElements() { return std::exchange(peak_gathered_, gathered_elements_); }

}  // namespace trainyard
