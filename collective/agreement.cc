#include "collective/agreement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

absl::StatusOr<std::vector<bool>> AnyRank(Collective* collective, const std::vector<bool>& mine) {
  if (collective->world_size() == 1 || mine.empty()) return mine;
  torch::Tensor flags = torch::zeros({static_cast<int64_t>(mine.size())}, torch::kFloat);
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i]) flags[static_cast<int64_t>(i)] = 1.0f;
  }
  std::vector<torch::Tensor> reduced = {flags};
  absl::Status s = collective->AllReduce(reduced, ReduceOp::kMax);
  if (!s.ok()) return s;
  std::vector<bool> any(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) any[i] = reduced[0][static_cast<int64_t>(i)].item<float>() > 0;
  return any;
}

absl::StatusOr<bool> AnyRank(Collective* collective, bool mine) {
  absl::StatusOr<std::vector<bool>> any = AnyRank(collective, std::vector<bool>{mine});
  if (!any.ok()) return any.status();
  return (*any)[0];
}

absl::Status AgreeOnOutcome(Collective* collective, const absl::Status& mine, absl::string_view what) {
  if (collective->world_size() == 1) return mine;
  std::vector<torch::Tensor> failed = {torch::zeros({collective->world_size()}, torch::kFloat)};
  if (!mine.ok()) failed[0][collective->rank()] = 1.0f;
  absl::Status s = collective->AllReduce(failed, ReduceOp::kSum);
  if (!s.ok()) return s;
  if (!mine.ok()) return mine;
  std::vector<std::string> ranks;
  for (int r = 0; r < collective->world_size(); ++r) {
    if (failed[0][r].item<float>() > 0) ranks.push_back(absl::StrCat(r));
  }
  if (ranks.empty()) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat(what, " failed on rank(s) ", absl::StrJoin(ranks, ", "), " (their errors are in their logs)"));
}

absl::StatusOr<int64_t> LowestValue(Collective* collective, int64_t mine) {
  if (collective->world_size() == 1) return mine;
  std::vector<torch::Tensor> lo = {torch::tensor({mine}, torch::kLong)};
  if (absl::Status s = collective->AllReduce(lo, ReduceOp::kMin); !s.ok()) return s;
  return lo[0].item<int64_t>();
}

absl::StatusOr<int64_t> AgreeOnValue(Collective* collective, int64_t mine, absl::string_view what) {
  if (collective->world_size() == 1) return mine;
  std::vector<torch::Tensor> hi = {torch::tensor({mine}, torch::kLong)};
  std::vector<torch::Tensor> lo = {torch::tensor({mine}, torch::kLong)};
  absl::Status s = collective->AllReduce(hi, ReduceOp::kMax);
  if (s.ok()) s = collective->AllReduce(lo, ReduceOp::kMin);
  if (!s.ok()) return s;
  const int64_t highest = hi[0].item<int64_t>(), lowest = lo[0].item<int64_t>();
  if (highest != lowest) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the ranks hold different values (", lowest, " to ", highest, ")"));
  }
  return mine;
}

absl::StatusOr<std::optional<Disagreement>> FindDisagreement(Collective* collective, const torch::Tensor& values) {
  if (collective->world_size() == 1) return std::optional<Disagreement>();
  const torch::Tensor mine = values.detach().to(torch::kCPU, torch::kDouble).reshape({-1});
  std::vector<torch::Tensor> hi = {mine.clone()}, lo = {mine.clone()};
  absl::Status s = collective->AllReduce(hi, ReduceOp::kMax);
  if (s.ok()) s = collective->AllReduce(lo, ReduceOp::kMin);
  if (!s.ok()) return s;
  if (torch::equal(hi[0], lo[0])) return std::optional<Disagreement>();
  Disagreement d;
  d.index = (hi[0] - lo[0]).abs().argmax().item<int64_t>();
  d.lowest = lo[0][d.index].item<double>();
  d.highest = hi[0][d.index].item<double>();
  return std::optional<Disagreement>(d);
}

}  // namespace trainyard
