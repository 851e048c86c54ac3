#include "trainer/rank_metrics.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

absl::Status CombineMetricPiecesInOrder(Collective* collective, int64_t steps,
                                        const std::vector<std::pair<int64_t, Metrics>>& pieces, Metrics* total) {
  Metrics names;  // the kinds and names, zeros
  const torch::Tensor zero = torch::zeros({}, torch::kDouble);
  if (!pieces.empty()) {
    for (const auto& [name, m] : pieces[0].second) names[name] = Metric{zero, zero, m.per_step};
  }
  TY_RETURN_IF_ERROR(AgreeOnNames(collective, &names));
  // Row s x most + j of each rank's table: its piece j of step s (most: the
  // most pieces any rank has of a step; unused rows unmarked).
  std::vector<int64_t> count(static_cast<size_t>(std::max<int64_t>(steps, 0)), 0);
  for (const auto& [s, m] : pieces) {
    if (s < 0 || s >= steps) return absl::InternalError(absl::StrCat("metrics of step ", s, " of ", steps));
    ++count[s];
  }
  std::vector<torch::Tensor> most = {
      torch::tensor({count.empty() ? int64_t{0} : *std::max_element(count.begin(), count.end())}, torch::kLong)};
  TY_RETURN_IF_ERROR(collective->AllReduce(most, ReduceOp::kMax));
  const int64_t m = most[0].item<int64_t>(), k = static_cast<int64_t>(names.size());
  total->clear();
  if (k == 0 || m == 0) return absl::OkStatus();  // the same on every rank
  // Columns: each metric's total and count, then 1 for a piece.
  torch::Tensor local = torch::zeros({steps * m, 2 * k + 1}, torch::kDouble);
  auto rows = local.accessor<double, 2>();
  std::fill(count.begin(), count.end(), 0);
  for (const auto& [s, piece] : pieces) {
    const int64_t row = s * m + count[s]++;
    if (piece.size() != names.size()) return absl::InternalError("a metrics piece has other metrics");
    int64_t j = 0;
    for (const auto& [name, kind] : names) {
      auto it = piece.find(name);
      if (it == piece.end()) return absl::InternalError(absl::StrCat("a metrics piece has no ", name));
      rows[row][2 * j] = it->second.total.item<double>();
      rows[row][2 * j + 1] = it->second.count.item<double>();
      ++j;
    }
    rows[row][2 * k] = 1;
  }
  std::vector<torch::Tensor> all;
  TY_RETURN_IF_ERROR(collective->AllGather(local, &all));
  for (int64_t s = 0; s < steps; ++s) {
    Metrics step;
    for (const torch::Tensor& rank : all) {
      auto r = rank.accessor<double, 2>();
      for (int64_t i = 0; i < m; ++i) {
        if (r[s * m + i][2 * k] == 0) continue;
        Metrics piece;
        int64_t j = 0;
        for (const auto& [name, kind] : names) {
          piece[name] = Metric{torch::tensor(r[s * m + i][2 * j], torch::kDouble),
                               torch::tensor(r[s * m + i][2 * j + 1], torch::kDouble), kind.per_step};
          ++j;
        }
        MergeMetrics(piece, /*within_step=*/true, &step);
      }
    }
    MergeMetrics(step, /*within_step=*/false, total);
  }
  return absl::OkStatus();
}

}  // namespace trainyard
