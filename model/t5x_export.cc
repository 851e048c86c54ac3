#include "model/t5x_export.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "model/t5x_import.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

// Our parameter `ours` as T5X's path, and whether T5X's layout is ours
// transposed: the inverse of OurT5xParameterName, checked against it.
std::optional<std::pair<std::string, bool>> T5xPath(const std::string& ours) {
  static const std::pair<const char*, const char*> kFixed[] = {
      {"token_embedder.weight", "token_embedder/embedding"},
      {"encoder_relpos.rel_embedding", "encoder/relpos_bias/rel_embedding"},
      {"decoder_relpos.rel_embedding", "decoder/relpos_bias/rel_embedding"},
      {"encoder_norm.scale", "encoder/encoder_norm/scale"},
      {"decoder_norm.scale", "decoder/decoder_norm/scale"},
      {"logits_dense.weight", "decoder/logits_dense/kernel"},
  };
  std::string path;
  for (const auto& [name, t5x] : kFixed) {
    if (ours == name) path = t5x;
  }
  for (const char* stack : {"encoder", "decoder"}) {
    const std::string prefix = absl::StrCat(stack, "_layers.");
    const size_t dot = ours.find('.', prefix.size());
    int layer;
    if (!path.empty() || !absl::StartsWith(ours, prefix) || dot == std::string::npos ||
        !absl::SimpleAtoi(ours.substr(prefix.size(), dot - prefix.size()), &layer)) {
      continue;
    }
    std::string rest = ours.substr(dot + 1);
    if (absl::EndsWith(rest, ".weight")) rest = rest.substr(0, rest.size() - 7) + ".kernel";
    path = absl::StrCat(stack, "/layers_", layer, "/", absl::StrReplaceAll(rest, {{".", "/"}}));
  }
  if (path.empty()) return std::nullopt;
  std::optional<std::pair<std::string, bool>> back = OurT5xParameterName(path);
  if (!back || back->first != ours) return std::nullopt;
  return std::make_pair(path, back->second);
}

// `t` (transposed first when `transpose`) in `type` as a ZarrArray.
ZarrArray ToArray(const torch::Tensor& t, bool transpose, torch::ScalarType type) {
  torch::Tensor c = (transpose ? t.t() : t).detach().to(torch::kCPU).to(type).contiguous();
  ZarrArray a;
  a.dtype = type == torch::kBFloat16 ? "bfloat16" : "float32";
  a.shape = c.sizes().vec();
  a.data.assign(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return a;
}

// T5X's shapes of v_row and v_col for a parameter of T5X's `shape`
// (adafactor.py: the dimensions argsorted, d0 the largest, d1 the next;
// v_row drops d0, v_col d1).
std::pair<std::vector<int64_t>, std::vector<int64_t>> FactoredShapes(const std::vector<int64_t>& shape) {
  std::vector<int64_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&shape](int64_t a, int64_t b) { return shape[a] < shape[b]; });
  std::vector<int64_t> row = shape, col = shape;
  row.erase(row.begin() + order.back());
  col.erase(col.begin() + order[order.size() - 2]);
  return {row, col};
}

// A parameter of ours as T5X names and lays it out.
struct Param {
  std::string ours;
  std::string path;  // T5X's
  bool transposed;
  std::vector<int64_t> shape;  // T5X's
};

// Our Adafactor slots of `p` as T5X's param_states in `state`; the slots
// taken are added to `used`.
absl::Status ExportSlots(const std::map<std::string, torch::Tensor>& adafactor, const Param& p,
                         std::map<std::string, ZarrArray>* state, std::set<std::string>* used) {
  auto slot = [&](const char* name) -> const torch::Tensor* {
    auto it = adafactor.find(p.ours + "/" + name);
    if (it == adafactor.end()) return nullptr;
    used->insert(it->first);
    return &it->second;
  };
  const torch::Tensor *row = slot("v_row"), *col = slot("v_col"), *v = slot("v"), *m = slot("m");
  const std::string out = "param_states/" + p.path + "/";
  const ZarrArray unused = ToArray(torch::zeros({1}), false, torch::kFloat);
  for (const char* name : {"v_row", "v_col", "v", "m"}) (*state)[out + name] = unused;
  const std::vector<int64_t> ours_shape = p.transposed ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape;
  auto check = [&](const torch::Tensor& t, const char* name, const std::vector<int64_t>& want) {
    if (t.sizes().vec() == want) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(p.ours, "/", name, ": ", Shape(t.sizes().vec()), "; T5X's ", name,
                                                   " of ", p.path, " ", Shape(p.shape), " is ", Shape(want)));
  };
  if (row != nullptr && col != nullptr && p.shape.size() >= 2) {
    // A square kernel: T5X factors along its own dimension order, the
    // other way round in ours.
    const bool swap = p.transposed && p.shape[0] == p.shape[1];
    const auto [row_shape, col_shape] = FactoredShapes(p.shape);
    TY_RETURN_IF_ERROR(check(swap ? *col : *row, "v_row", row_shape));
    TY_RETURN_IF_ERROR(check(swap ? *row : *col, "v_col", col_shape));
    (*state)[out + "v_row"] = ToArray(swap ? *col : *row, false, torch::kFloat);
    (*state)[out + "v_col"] = ToArray(swap ? *row : *col, false, torch::kFloat);
  } else if (v != nullptr && row == nullptr && col == nullptr) {
    TY_RETURN_IF_ERROR(check(*v, "v", ours_shape));
    (*state)[out + "v"] = ToArray(*v, p.transposed, torch::kFloat);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(p.ours, ": Adafactor's statistics are neither v_row and v_col (",
                                                   p.shape.size(), "-D) nor v alone"));
  }
  if (m != nullptr) {
    TY_RETURN_IF_ERROR(check(*m, "m", ours_shape));
    (*state)[out + "m"] = ToArray(*m, p.transposed, torch::kFloat);
  }
  return absl::OkStatus();
}

// Every parameter as T5X names it; those that have no T5X name, or a kernel
// that is not 2-D, are named together in one kInvalidArgument.
absl::StatusOr<std::vector<Param>> T5xParams(const TensorMap& params) {
  std::vector<Param> out;
  std::vector<std::string> problems;
  for (const auto& [name, t] : params) {
    std::optional<std::pair<std::string, bool>> path = T5xPath(name);
    if (!path) {
      problems.push_back(
          absl::StrCat(name, " ", Shape(t.sizes().vec()), " is not a parameter of T5 1.0 or T5.1.1 in T5X's layout"));
    } else if (path->second && t.dim() != 2) {
      problems.push_back(absl::StrCat(name, " ", Shape(t.sizes().vec()), " is not a 2-D kernel"));
    } else {
      std::vector<int64_t> shape = t.sizes().vec();
      if (path->second) std::swap(shape[0], shape[1]);
      out.push_back(Param{name, path->first, path->second, shape});
    }
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  return out;
}

}  // namespace

absl::StatusOr<std::string> WhyNotAdafactorState(const std::string& metadata_json,
                                                 const std::map<std::string, torch::Tensor>& optimizer) {
  if (optimizer.empty() || (optimizer.size() == 1 && optimizer.count("step") == 1)) {
    return std::string("the checkpoint has no optimizer state");
  }
  try {
    const nlohmann::json meta = nlohmann::json::parse(metadata_json);
    const nlohmann::json job = meta.is_object() ? meta.value("job", nlohmann::json()) : nlohmann::json();
    if (job.is_object() && job.contains("optimizer") && job["optimizer"].is_object() &&
        job["optimizer"].contains("adamw")) {
      return std::string("an AdamW checkpoint: T5X's Adafactor statistics cannot be made from AdamW's moments");
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("metadata.json: ", e.what()));
  }
  return std::string();
}

absl::StatusOr<T5xCheckpoint> ExportT5x(const TensorMap& params, const std::map<std::string, torch::Tensor>& adafactor,
                                        int64_t step, torch::ScalarType param_dtype) {
  if (param_dtype != torch::kFloat && param_dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("T5X saves parameters as float32 or bfloat16, not ", c10::toString(param_dtype)));
  }
  T5xCheckpoint out;
  out.version = 3;
  out.step = step;
  try {
    TY_ASSIGN_OR_RETURN(const std::vector<Param> t5x, T5xParams(params));
    for (const Param& p : t5x) out.target[p.path] = ToArray(params.at(p.ours), p.transposed, param_dtype);
    const bool has_statistics =
        std::any_of(adafactor.begin(), adafactor.end(), [](const auto& slot) { return slot.first != "step"; });
    if (!has_statistics) return out;
    std::set<std::string> used = {"step"};
    for (const Param& p : t5x) TY_RETURN_IF_ERROR(ExportSlots(adafactor, p, &out.state, &used));
    std::vector<std::string> stray;
    for (const auto& slot : adafactor) {
      if (used.count(slot.first) == 0) stray.push_back(slot.first);
    }
    if (!stray.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state of no parameter or not Adafactor's: ", absl::StrJoin(stray, ", ")));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
  return out;
}

}  // namespace trainyard
