// Trainer's exact reduction (TrainerOptions::exact_reduction): a step's
// gradient as the exact sum of its global microbatches' gradients, its
// metrics added in global order; and the dropout keys (per global
// microbatch with it, per rank without).
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "common/torch/device.h"
#include "trainer/rank_metrics.h"
#include "trainer/trainer.h"

namespace trainyard {
namespace {

// Values may grow 8-fold from one step's largest before a step is computed
// again.
constexpr int kExactHeadroom = 3;

}  // namespace

void Trainer::SetUpExactSum() {
  // One rank sums in exact_ itself; more than one in the gradient reducer,
  // made with exact_ (its scales and observed exponents only), bucket by
  // bucket as backward produces them.
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& [name, p] : params_) shapes.push_back(p.sizes().vec());
  exact_ = std::make_unique<ExactSum>(shapes, std::max<int64_t>(options_.global_microbatches, 1));
  // The first step finds its scales (computed twice).
  exact_exponents_.assign(params_.size(), kExactSumMinExponent);
}

at::Generator Trainer::DropoutGenerator(int64_t step, int microbatch) const {
  if (exact_ != nullptr) return ExactDropoutGenerator(step, microbatch);
  const uint64_t key =
      SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(step) ^
                                            SplitMix64(static_cast<uint64_t>(collective_->rank()) * 1000003ull +
                                                       static_cast<uint64_t>(microbatch))));
  return MakeGenerator(device_, key);
}

at::Generator Trainer::ExactDropoutGenerator(int64_t step, int microbatch) const {
  // The global microbatch's key, whatever rank draws it.
  const uint64_t global = static_cast<uint64_t>(options_.first_global_microbatch + microbatch);
  const uint64_t key = SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(step) ^ SplitMix64(~global)));
  return MakeGenerator(device_, key);
}

absl::Status Trainer::StartExactSum() {
  if (reducer_ == nullptr) return exact_->Reset(exact_exponents_);
  // With a reducer, its buckets hold the integers.
  reducer_->ZeroGrads();
  return exact_->SetScales(exact_exponents_);
}

absl::Status Trainer::ReduceNoGradients() {
  if (exact_ == nullptr || reducer_ == nullptr) return absl::OkStatus();
  reducer_->Arm();
  return FinishPass();
}

std::map<std::string, int> Trainer::ExactSumExponents() const {
  std::map<std::string, int> out;
  if (exact_ == nullptr) return out;
  for (size_t i = 0; i < params_.size(); ++i) out[params_[i].first] = exact_exponents_[i];
  return out;
}

absl::Status Trainer::RestoreExactSumExponents(const std::map<std::string, int>& exponents) {
  if (exact_ == nullptr)
    return absl::FailedPreconditionError("exact_sum_exponents: this trainer sums in floating point");
  std::vector<int> next(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = exponents.find(params_[i].first);
    if (it == exponents.end()) {
      return absl::InvalidArgumentError(absl::StrCat("exact_sum_exponents: no exponent for ", params_[i].first));
    }
    if (it->second < kExactSumMinExponent || it->second > kExactSumMaxExponent) {
      return absl::InvalidArgumentError(absl::StrCat("exact_sum_exponents: ", params_[i].first, ": ", it->second,
                                                     " is outside [", kExactSumMinExponent, ", ", kExactSumMaxExponent,
                                                     "]"));
    }
    next[i] = it->second;
  }
  if (exponents.size() != params_.size()) {
    for (const auto& entry : exponents) {
      const std::string& name = entry.first;
      if (std::none_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == name; })) {
        return absl::InvalidArgumentError(absl::StrCat("exact_sum_exponents: ", name, " is not a parameter"));
      }
    }
  }
  exact_exponents_ = std::move(next);
  return absl::OkStatus();
}

absl::Status Trainer::AddExactTerm(const Metrics& metrics) {
  exact_metric_terms_.push_back(metrics);
  // With a reducer, it added them as their buckets started.
  if (reducer_ != nullptr) return absl::OkStatus();
  std::vector<torch::Tensor> term;
  for (auto& [name, p] : params_) {
    term.push_back(p.grad().defined() ? p.grad().to(torch::kCPU) : torch::zeros(p.sizes()));
  }
  const absl::Status added = exact_->Add(term);
  ClearGrads();  // added, or the step abandoned
  return added;
}

absl::StatusOr<bool> Trainer::CombineExactSums() {
  std::vector<int>& observed = exact_->observed();
  std::vector<torch::Tensor> largest = {torch::tensor(std::vector<int64_t>(observed.begin(), observed.end()))};
  TY_RETURN_IF_ERROR(collective_->AllReduce(largest, ReduceOp::kMax));
  for (size_t i = 0; i < observed.size(); ++i) observed[i] = static_cast<int>(largest[0][i].item<int64_t>());
  exact_exponents_ = exact_->NextExponents(kExactHeadroom);
  if (exact_->Overflowed()) return false;
  // With a reducer, its buckets (or shard) hold the reduced sums already
  // (ApplyGradsAndGather reads them).
  if (reducer_ != nullptr) return true;
  TY_RETURN_IF_ERROR(collective_->AllReduce(exact_->integers(), ReduceOp::kSum));
  std::vector<torch::Tensor> sums = exact_->ToFloat();
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i].second;
    p.mutable_grad() = sums[i].to(p.device(), p.scalar_type());
  }
  return true;
}

absl::StatusOr<Metrics> Trainer::AccumulateExactly(const T5Batch& batch, int64_t step, double global_target_tokens) {
  const size_t terms_before = exact_metric_terms_.size();
  // A step that fails part way leaves the scales it started with: its
  // retry (ELASTIC, on another group) sums as the step would have.
  const std::vector<int> start = exact_exponents_;
  auto failed = [&](const absl::Status& s) {
    exact_exponents_ = start;
    exact_metric_terms_.resize(terms_before);
    return s;
  };
  for (int pass = 0; pass < 2; ++pass) {
    exact_metric_terms_.resize(terms_before);  // a step computed again counts once
    if (absl::Status s = StartExactSum(); !s.ok()) return failed(s);
    absl::StatusOr<Metrics> metrics = AccumulateGradsMicrobatched(batch, step, global_target_tokens);
    if (!metrics.ok()) return failed(metrics.status());
    absl::StatusOr<bool> combined = CombineExactSums();
    if (!combined.ok()) return failed(combined.status());
    exact_terms_per_step_ = static_cast<int64_t>(exact_metric_terms_.size() - terms_before);
    if (*combined) return metrics;
  }
  // Computed again at the scales its values needed and still beyond them:
  // a value that is not finite (no scale holds it).
  return absl::InternalError(
      absl::StrCat("step ", step, ": a gradient is not finite (the exact reduction holds finite values only)"));
}

absl::Status Trainer::CombineRankMetrics(int64_t steps, Metrics* total) {
  return exact_ ? CombineExactMetrics(steps, total) : AllReduceMetrics(collective_, steps, total);
}

absl::Status Trainer::CombineExactMetrics(int64_t steps, Metrics* total) {
  const size_t mine = static_cast<size_t>(steps * exact_terms_per_step_);
  std::vector<std::pair<int64_t, Metrics>> pieces;
  // The last chunk's (a failed chunk's finished steps are left before them).
  if (exact_metric_terms_.size() >= mine) {
    for (size_t t = exact_metric_terms_.size() - mine; t < exact_metric_terms_.size(); ++t) {
      pieces.emplace_back(static_cast<int64_t>(pieces.size()) / exact_terms_per_step_, exact_metric_terms_[t]);
    }
  }
  exact_metric_terms_.clear();
  if (pieces.size() != mine || exact_terms_per_step_ > options_.num_microbatches) {
    return absl::InternalError(absl::StrCat("the exact metrics: ", pieces.size(), " microbatches for ", steps,
                                            " steps of ", exact_terms_per_step_, " (at most ",
                                            options_.num_microbatches, ")"));
  }
  // Rank by rank, microbatch by microbatch: the global microbatches in
  // order (each rank's share is the next run of them).
  return CombineMetricPiecesInOrder(collective_, steps, pieces, total);
}

}  // namespace trainyard
