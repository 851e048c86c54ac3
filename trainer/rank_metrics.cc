#include "trainer/rank_metrics.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "collective/agreement.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

// Where some rank holds no metrics (it took part in no step), every rank
// gets the names and kinds of the lowest rank that holds some, so that all
// all-reduce the same tensors; the empty ones contribute zeros.
absl::Status AgreeOnNames(Collective* collective, Metrics* metrics) {
  TY_ASSIGN_OR_RETURN(bool some_empty, AnyRank(collective, metrics->empty()));
  if (!some_empty) return absl::OkStatus();
  const int world = collective->world_size();
  std::vector<torch::Tensor> root = {torch::tensor({metrics->empty() ? world : collective->rank()}, torch::kLong)};
  TY_RETURN_IF_ERROR(collective->AllReduce(root, ReduceOp::kMin));
  const int source = static_cast<int>(root[0].item<int64_t>());
  if (source == world) return absl::OkStatus();  // no rank holds any
  // "<kind><name>\n" per metric, kind 1 for per-step, as one long per byte.
  std::string names;
  for (const auto& [name, m] : *metrics) names += (m.per_step ? "1" : "0") + name + "\n";
  std::vector<torch::Tensor> size = {torch::tensor({static_cast<int64_t>(names.size())}, torch::kLong)};
  TY_RETURN_IF_ERROR(collective->Broadcast(size, source));
  std::vector<torch::Tensor> bytes = {torch::zeros({size[0].item<int64_t>()}, torch::kLong)};
  if (collective->rank() == source) {
    for (size_t i = 0; i < names.size(); ++i) bytes[0][static_cast<int64_t>(i)] = static_cast<int64_t>(names[i]);
  }
  TY_RETURN_IF_ERROR(collective->Broadcast(bytes, source));
  if (!metrics->empty()) return absl::OkStatus();
  names.clear();
  for (int64_t i = 0; i < bytes[0].size(0); ++i) names += static_cast<char>(bytes[0][i].item<int64_t>());
  for (absl::string_view line : absl::StrSplit(names, '\n', absl::SkipEmpty())) {
    const torch::Tensor zero = torch::zeros({}, torch::kDouble);
    (*metrics)[std::string(line.substr(1))] = Metric{zero, zero.clone(), line[0] == '1'};
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AllReduceMetrics(Collective* collective, int64_t steps, Metrics* metrics) {
  if (collective->world_size() == 1) return absl::OkStatus();
  TY_RETURN_IF_ERROR(AgreeOnNames(collective, metrics));
  if (metrics->empty()) return absl::OkStatus();
  std::vector<torch::Tensor> parts;
  for (auto& [name, m] : *metrics) {
    parts.push_back(m.total.reshape({1}));
    parts.push_back(m.count.reshape({1}));
  }
  std::vector<torch::Tensor> flat = {torch::cat(parts)};
  TY_RETURN_IF_ERROR(collective->AllReduce(flat, ReduceOp::kSum));
  int64_t i = 0;
  for (auto& [name, m] : *metrics) {
    m.total = flat[0][i++].clone();
    torch::Tensor count = flat[0][i++].clone();
    // A per-step metric counts the global steps, however many of them each
    // rank took part in.
    m.count = m.per_step ? torch::full_like(count, static_cast<double>(steps)) : count;
  }
  return absl::OkStatus();
}

}  // namespace trainyard
