#include "model/t5x_import.h"

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
#include "checkpoint/t5x_checkpoint.h"
#include "common/status_macros.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

absl::StatusOr<torch::Tensor> ToTensor(const ZarrArray& a, const std::string& name) {
  torch::ScalarType type;
  if (a.dtype == "float32") {
    type = torch::kFloat;
  } else if (a.dtype == "bfloat16") {
    type = torch::kBFloat16;
  } else if (a.dtype == "float16") {
    type = torch::kHalf;
  } else if (a.dtype == "float64") {
    type = torch::kDouble;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", a.dtype, " is not a floating-point type"));
  }
  // from_blob does not copy: clone before `a` goes away.
  return torch::from_blob(const_cast<char*>(a.data.data()), a.shape, torch::TensorOptions().dtype(type))
      .to(torch::kFloat)
      .clone();
}

}  // namespace

std::optional<std::pair<std::string, bool>> OurT5xParameterName(const std::string& path) {
  static const std::pair<const char*, const char*> kFixed[] = {
      {"token_embedder/embedding", "token_embedder.weight"},
      {"encoder/relpos_bias/rel_embedding", "encoder_relpos.rel_embedding"},
      {"decoder/relpos_bias/rel_embedding", "decoder_relpos.rel_embedding"},
      {"encoder/encoder_norm/scale", "encoder_norm.scale"},
      {"decoder/decoder_norm/scale", "decoder_norm.scale"},
  };
  for (const auto& [t5x, ours] : kFixed) {
    if (path == t5x) return std::make_pair(std::string(ours), false);
  }
  if (path == "decoder/logits_dense/kernel") return std::make_pair(std::string("logits_dense.weight"), true);
  for (const char* stack : {"encoder", "decoder"}) {
    const std::string prefix = absl::StrCat(stack, "/layers_");
    if (!absl::StartsWith(path, prefix)) continue;
    const size_t slash = path.find('/', prefix.size());
    int layer;
    if (slash == std::string::npos || !absl::SimpleAtoi(path.substr(prefix.size(), slash - prefix.size()), &layer)) {
      return std::nullopt;
    }
    std::string rest = absl::StrReplaceAll(path.substr(slash + 1), {{"/", "."}});
    const bool kernel = absl::EndsWith(rest, ".kernel");
    if (kernel) rest = rest.substr(0, rest.size() - 7) + ".weight";
    if (!kernel && !absl::EndsWith(rest, "_layer_norm.scale")) return std::nullopt;
    return std::make_pair(absl::StrCat(stack, "_layers.", layer, ".", rest), kernel);
  }
  return std::nullopt;
}

namespace {

// The architecture from the parameters' shapes.
absl::StatusOr<ModelConfig> InferConfig(const T5xCheckpoint& ckpt) {
  const std::string file = ckpt.file.empty() ? ckpt.dir + "/checkpoint" : ckpt.file;
  auto shape_of = [&](const std::string& name) -> const std::vector<int64_t>* {
    auto it = ckpt.target.find(name);
    return it == ckpt.target.end() ? nullptr : &it->second.shape;
  };
  if (shape_of("encoder/layers_0/relpos_bias/rel_embedding") != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        file,
        ": per-layer relative position biases (encoder/layers_0/relpos_bias, as umT5 has) are not supported; "
        "T5 shares one table per stack"));
  }
  for (const char* scanned : {"encoder/encoder/attention/query/kernel", "encoder/layers/attention/query/kernel"}) {
    if (shape_of(scanned) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", scanned,
                                                     ": a scanned (stacked-layer) layout; only T5X's per-layer "
                                                     "T5 1.0 and T5.1.1 layouts are read"));
    }
  }
  const std::vector<int64_t>* embedding = shape_of("token_embedder/embedding");
  const std::vector<int64_t>* rel = shape_of("encoder/relpos_bias/rel_embedding");
  const std::vector<int64_t>* query = shape_of("encoder/layers_0/attention/query/kernel");
  const bool gated = shape_of("encoder/layers_0/mlp/wi_0/kernel") != nullptr;
  const std::vector<int64_t>* wi =
      shape_of(gated ? "encoder/layers_0/mlp/wi_0/kernel" : "encoder/layers_0/mlp/wi/kernel");
  const std::pair<const char*, const std::vector<int64_t>*> needed[] = {
      {"token_embedder/embedding", embedding},
      {"encoder/relpos_bias/rel_embedding", rel},
      {"encoder/layers_0/attention/query/kernel", query},
      {"encoder/layers_0/mlp/wi_0/kernel (T5.1.1) or encoder/layers_0/mlp/wi/kernel (T5 1.0)", wi}};
  for (const auto& [name, shape] : needed) {
    if (shape == nullptr || shape->size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": ", name, shape == nullptr ? " is missing" : " is not 2-D",
                       "; not a T5 checkpoint in T5X's layout (t5x/examples/t5/network.py)"));
    }
  }
  const int64_t heads = (*rel)[0];
  if (heads <= 0 || (*query)[1] % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": encoder/layers_0/attention/query/kernel ", Shape(*query),
                                                   " does not split over the ", heads, " heads of relpos_bias"));
  }
  auto count = [&](const char* stack) {
    int n = 0;
    while (shape_of(absl::StrCat(stack, "/layers_", n, "/pre_mlp_layer_norm/scale")) != nullptr) ++n;
    return n;
  };
  ModelConfig c;
  c.set_vocab_size(static_cast<int32_t>((*embedding)[0]));
  c.set_d_model(static_cast<int32_t>((*embedding)[1]));
  c.set_num_heads(static_cast<int32_t>(heads));
  c.set_d_kv(static_cast<int32_t>((*query)[1] / heads));
  c.set_d_ff(static_cast<int32_t>((*wi)[1]));
  c.set_num_encoder_layers(count("encoder"));
  c.set_num_decoder_layers(count("decoder"));
  c.set_feed_forward(gated ? ModelConfig::GATED_GELU : ModelConfig::RELU);
  c.set_tie_embeddings(shape_of("decoder/logits_dense/kernel") == nullptr);
  c.set_relative_attention_num_buckets(static_cast<int32_t>((*rel)[1]));
  c.set_relative_attention_max_distance(128);
  c.set_layer_norm_epsilon(1e-6f);
  c.set_dropout_rate(gated ? 0.0f : 0.1f);
  FillModelConfigDefaults(&c);
  return c;
}

// A parameter of the checkpoint's target as we imported it: our name,
// whether its layout was transposed, and T5X's shape.
struct ImportedParam {
  std::string ours;
  bool transposed;
  std::vector<int64_t> shape;
};
using ImportedParams = std::map<std::string, ImportedParam>;  // by T5X's path

// Every tensor of the checkpoint's target into `params` under our name (a
// kernel transposed); returns what each became. Tensors that are not
// parameters of ours are named together in one kInvalidArgument.
absl::StatusOr<ImportedParams> ImportParams(const T5xCheckpoint& ckpt, const std::string& file, TensorMap* params) {
  std::vector<std::string> problems;
  ImportedParams imported;
  for (const auto& [t5x, array] : ckpt.target) {
    std::optional<std::pair<std::string, bool>> name = OurT5xParameterName(t5x);
    if (!name) {
      problems.push_back(absl::StrCat(file, ": target/", t5x, " ", Shape(array.shape),
                                      " is not a parameter of T5 1.0 or T5.1.1 in T5X's layout"));
      continue;
    }
    if (name->second && array.shape.size() != 2) {
      problems.push_back(absl::StrCat(file, ": target/", t5x, " ", Shape(array.shape), " is not a 2-D kernel"));
      continue;
    }
    TY_ASSIGN_OR_RETURN(torch::Tensor t, ToTensor(array, "target/" + t5x));
    (*params)[name->first] = name->second ? t.t().contiguous() : t;
    imported[t5x] = ImportedParam{name->first, name->second, array.shape};
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  return imported;
}

// Adafactor (t5x/adafactor.py): per parameter v_row and v_col (factored:
// the mean square over the larger and the smaller dimension), or v
// (unfactored), and m (momentum); unused slots are zeros of shape [1].
// Whether the optimizer state holds any of them.
bool HasAdafactorState(const std::map<std::string, ZarrArray>& state) {
  for (const auto& entry : state) {
    const std::string& key = entry.first;
    const bool slot = absl::EndsWith(key, "/v_row") || absl::EndsWith(key, "/v_col") || absl::EndsWith(key, "/v") ||
                      absl::EndsWith(key, "/m");
    if (absl::StartsWith(key, "param_states/") && slot) return true;
  }
  return false;
}

// The Adafactor slot `name` of T5X's parameter `t5x`, or nullptr when the
// state has none or an unused one.
const ZarrArray* AdafactorSlot(const T5xCheckpoint& ckpt, const std::string& t5x, const char* name) {
  auto it = ckpt.state.find(absl::StrCat("param_states/", t5x, "/", name));
  if (it == ckpt.state.end()) return nullptr;
  if (it->second.shape == std::vector<int64_t>{1}) return nullptr;  // unused: zeros of shape [1]
  return &it->second;
}

// Parameter `t5x`'s Adafactor statistics as our Adafactor's slots in
// `optimizer`: v_row and v_col, or v; and m when it has one.
absl::Status ImportAdafactorSlots(const T5xCheckpoint& ckpt, const std::string& file, const std::string& t5x,
                                  const ImportedParam& p, std::map<std::string, torch::Tensor>* optimizer) {
  const ZarrArray* v_row = AdafactorSlot(ckpt, t5x, "v_row");
  const ZarrArray* v_col = AdafactorSlot(ckpt, t5x, "v_col");
  const ZarrArray* v = AdafactorSlot(ckpt, t5x, "v");
  const ZarrArray* m = AdafactorSlot(ckpt, t5x, "m");
  const std::string where = absl::StrCat(file, ": state/param_states/", t5x);
  if (v_row != nullptr && v_col != nullptr) {
    TY_ASSIGN_OR_RETURN(torch::Tensor row, ToTensor(*v_row, where + "/v_row"));
    TY_ASSIGN_OR_RETURN(torch::Tensor col, ToTensor(*v_col, where + "/v_col"));
    // Both keep the smaller dimension in v_row; a square kernel is
    // factored along T5X's dimension order ([in, out]), which is the
    // other way round in ours ([out, in]).
    const bool swap = p.transposed && p.shape.size() == 2 && p.shape[0] == p.shape[1];
    (*optimizer)[p.ours + "/v_row"] = swap ? col : row;
    (*optimizer)[p.ours + "/v_col"] = swap ? row : col;
  } else if (v != nullptr) {
    TY_ASSIGN_OR_RETURN(torch::Tensor t, ToTensor(*v, where + "/v"));
    if (v->shape != p.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "/v: ", Shape(v->shape), " for a parameter of ", Shape(p.shape)));
    }
    (*optimizer)[p.ours + "/v"] = p.transposed ? t.t().contiguous() : t;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(where, ": neither v_row and v_col nor v"));
  }
  if (m != nullptr) {
    TY_ASSIGN_OR_RETURN(torch::Tensor t, ToTensor(*m, where + "/m"));
    if (m->shape != p.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "/m: ", Shape(m->shape), " for a parameter of ", Shape(p.shape)));
    }
    (*optimizer)[p.ours + "/m"] = p.transposed ? t.t().contiguous() : t;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<T5xImport> ImportT5x(const std::string& path) {
  TY_ASSIGN_OR_RETURN(T5xCheckpoint ckpt, ReadT5xCheckpoint(path));
  T5xImport out;
  out.dir = ckpt.dir;
  out.step = ckpt.step;
  TY_ASSIGN_OR_RETURN(out.config, InferConfig(ckpt));
  const std::string file = ckpt.file.empty() ? ckpt.dir + "/checkpoint" : ckpt.file;
  try {
    TY_ASSIGN_OR_RETURN(const ImportedParams params, ImportParams(ckpt, file, &out.params));
    if (!HasAdafactorState(ckpt.state)) {
      out.optimizer_note = ckpt.state.empty() ? "the checkpoint has no optimizer state"
                                              : "the checkpoint's optimizer state is not T5X's Adafactor's "
                                                "(no param_states/.../v_row, v_col or v)";
      return out;
    }
    for (const auto& [t5x, p] : params) {
      TY_RETURN_IF_ERROR(ImportAdafactorSlots(ckpt, file, t5x, p, &out.optimizer));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(file, ": ", e.what_without_backtrace()));
  }
  return out;
}

}  // namespace trainyard
