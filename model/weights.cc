#include "model/weights.h"

#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_vocabulary.h"
#include "checkpoint/safetensors.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

absl::StatusOr<torch::ScalarType> TorchType(SafeDtype dtype) {
  switch (dtype) {
    case SafeDtype::kF64:
      return torch::kDouble;
    case SafeDtype::kF32:
      return torch::kFloat;
    case SafeDtype::kF16:
      return torch::kHalf;
    case SafeDtype::kBF16:
      return torch::kBFloat16;
    case SafeDtype::kI64:
      return torch::kLong;
    case SafeDtype::kI32:
      return torch::kInt;
    case SafeDtype::kI16:
      return torch::kShort;
    case SafeDtype::kI8:
      return torch::kChar;
    case SafeDtype::kU8:
      return torch::kByte;
    case SafeDtype::kBool:
      return torch::kBool;
  }
  return absl::InvalidArgumentError("unknown dtype");
}

std::string ShapeString(c10::IntArrayRef shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// One parameter: our name, Hugging Face's, and whether the layouts are
// transposed (relative position tables: ours [heads, buckets], HF's
// [buckets, heads]).
struct NamePair {
  std::string ours;
  std::string hf;
  bool transpose = false;
};

std::vector<NamePair> HfNames(const ModelConfig& c) {
  std::vector<NamePair> names;
  const bool gated = c.feed_forward() == ModelConfig::GATED_GELU;
  const std::vector<std::string> mlp =
      gated ? std::vector<std::string>{"wi_0", "wi_1", "wo"} : std::vector<std::string>{"wi", "wo"};
  const std::pair<const char*, const char*> attention[] = {{"query", "q"}, {"key", "k"}, {"value", "v"}, {"out", "o"}};
  names.push_back({"token_embedder.weight", "shared.weight"});
  for (int i = 0; i < c.num_encoder_layers(); ++i) {
    const std::string ours = absl::StrCat("encoder_layers.", i, ".");
    const std::string hf = absl::StrCat("encoder.block.", i, ".layer.");
    for (const auto& [o, h] : attention) {
      names.push_back({ours + "attention." + o + ".weight", hf + "0.SelfAttention." + h + ".weight"});
    }
    names.push_back({ours + "pre_attention_layer_norm.scale", hf + "0.layer_norm.weight"});
    for (const std::string& w : mlp) {
      names.push_back({ours + "mlp." + w + ".weight", hf + "1.DenseReluDense." + w + ".weight"});
    }
    names.push_back({ours + "pre_mlp_layer_norm.scale", hf + "1.layer_norm.weight"});
  }
  names.push_back(
      {"encoder_relpos.rel_embedding", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", true});
  names.push_back({"encoder_norm.scale", "encoder.final_layer_norm.weight"});
  for (int i = 0; i < c.num_decoder_layers(); ++i) {
    const std::string ours = absl::StrCat("decoder_layers.", i, ".");
    const std::string hf = absl::StrCat("decoder.block.", i, ".layer.");
    for (const auto& [o, h] : attention) {
      names.push_back({ours + "self_attention." + o + ".weight", hf + "0.SelfAttention." + h + ".weight"});
      names.push_back({ours + "encoder_decoder_attention." + o + ".weight", hf + "1.EncDecAttention." + h + ".weight"});
    }
    names.push_back({ours + "pre_self_attention_layer_norm.scale", hf + "0.layer_norm.weight"});
    names.push_back({ours + "pre_cross_attention_layer_norm.scale", hf + "1.layer_norm.weight"});
    for (const std::string& w : mlp) {
      names.push_back({ours + "mlp." + w + ".weight", hf + "2.DenseReluDense." + w + ".weight"});
    }
    names.push_back({ours + "pre_mlp_layer_norm.scale", hf + "2.layer_norm.weight"});
  }
  names.push_back(
      {"decoder_relpos.rel_embedding", "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", true});
  names.push_back({"decoder_norm.scale", "decoder.final_layer_norm.weight"});
  if (!c.tie_embeddings()) names.push_back({"logits_dense.weight", "lm_head.weight"});
  return names;
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

absl::StatusOr<TensorMap> ReadTensors(const std::string& path, const std::function<bool(const std::string&)>& keep,
                                      std::vector<std::string>* names) {
  TY_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsReader> reader, SafetensorsReader::Open(path));
  TensorMap tensors;
  for (const SafeTensorInfo& info : reader->tensors()) {
    if (names != nullptr) names->push_back(info.name);
    if (keep && !keep(info.name)) continue;
    TY_ASSIGN_OR_RETURN(torch::ScalarType type, TorchType(info.dtype));
    // from_blob does not copy; clone before the mapping goes away.
    torch::Tensor t =
        torch::from_blob(const_cast<uint8_t*>(reader->Data(info)), info.shape, torch::TensorOptions().dtype(type))
            .to(torch::kFloat)
            .clone();
    tensors.emplace(info.name, std::move(t));
  }
  return tensors;
}

absl::Status WriteTensorsAs(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                            torch::ScalarType dtype, const std::map<std::string, std::string>& metadata) {
  if (dtype != torch::kFloat && dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError("parameters are saved as float32 or bfloat16");
  }
  std::vector<torch::Tensor> keep;  // owns the bytes while writing
  std::vector<SafeTensorView> views;
  for (const auto& [name, tensor] : tensors) {
    torch::Tensor t = tensor.detach().to(torch::kCPU).to(dtype).contiguous();
    keep.push_back(t);
    views.push_back({name, dtype == torch::kFloat ? SafeDtype::kF32 : SafeDtype::kBF16, t.sizes().vec(), t.data_ptr()});
  }
  return WriteSafetensors(path, views, metadata);
}

absl::Status SaveParameters(T5Impl& model, const std::string& path, torch::ScalarType dtype,
                            const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& item : model.named_parameters()) params.emplace_back(item.key(), item.value());
  return WriteTensorsAs(path, params, dtype, metadata);
}

std::string ModelConfigJson(const ModelConfig& config) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(config, &json, options);
  return json;
}

absl::Status AssignParameters(const TensorMap& tensors, bool strict, T5Impl* model,
                              const std::function<bool(const std::string&)>& hold) {
  auto params = model->named_parameters();
  std::vector<std::pair<torch::Tensor, const torch::Tensor*>> plan;
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const auto& item : params) {
    auto it = tensors.find(item.key());
    if (hold != nullptr && !hold(item.key())) {
      if (it != tensors.end()) used.insert(item.key());
      continue;
    }
    if (it == tensors.end()) {
      if (strict) problems.push_back(absl::StrCat("parameter \"", item.key(), "\" is missing"));
      continue;
    }
    used.insert(item.key());
    if (it->second.sizes() != item.value().sizes()) {
      problems.push_back(absl::StrCat("tensor \"", item.key(), "\" has shape ", ShapeString(it->second.sizes()),
                                      "; the model needs ", ShapeString(item.value().sizes())));
      continue;
    }
    plan.emplace_back(item.value(), &it->second);
  }
  if (strict) {
    for (const auto& [name, tensor] : tensors) {
      if (!used.count(name)) problems.push_back(absl::StrCat("tensor \"", name, "\" is not a parameter of the model"));
    }
  }
  if (!problems.empty()) {
    if (problems.size() > 20) {
      const size_t more = problems.size() - 20;
      problems.resize(20);
      problems.push_back(absl::StrCat("... and ", more, " more"));
    }
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  torch::NoGradGuard no_grad;
  for (auto& [param, source] : plan) param.copy_(*source);
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ReadHfConfig(const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadText(path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON: ", e.what()));
  }
  auto get_int = [&](const char* key, bool required, int fallback) -> absl::StatusOr<int> {
    if (!j.contains(key) || j[key].is_null()) {
      if (required) return absl::InvalidArgumentError(absl::StrCat(path, ": missing \"", key, "\""));
      return fallback;
    }
    if (!j[key].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"", key, "\" is not an integer"));
    }
    return j[key].get<int>();
  };
  ModelConfig c;
  TY_ASSIGN_OR_RETURN(int vocab, get_int("vocab_size", true, 0));
  TY_ASSIGN_OR_RETURN(int d_model, get_int("d_model", true, 0));
  TY_ASSIGN_OR_RETURN(int d_kv, get_int("d_kv", true, 0));
  TY_ASSIGN_OR_RETURN(int d_ff, get_int("d_ff", true, 0));
  TY_ASSIGN_OR_RETURN(int layers, get_int("num_layers", true, 0));
  TY_ASSIGN_OR_RETURN(int decoder_layers, get_int("num_decoder_layers", false, layers));
  TY_ASSIGN_OR_RETURN(int heads, get_int("num_heads", true, 0));
  TY_ASSIGN_OR_RETURN(int buckets, get_int("relative_attention_num_buckets", false, 32));
  TY_ASSIGN_OR_RETURN(int distance, get_int("relative_attention_max_distance", false, 128));
  c.set_vocab_size(vocab);
  c.set_d_model(d_model);
  c.set_d_kv(d_kv);
  c.set_d_ff(d_ff);
  c.set_num_encoder_layers(layers);
  c.set_num_decoder_layers(decoder_layers);
  c.set_num_heads(heads);
  c.set_relative_attention_num_buckets(buckets);
  c.set_relative_attention_max_distance(distance);
  c.set_dropout_rate(j.value("dropout_rate", 0.1));
  c.set_layer_norm_epsilon(j.value("layer_norm_epsilon", 1e-6));
  const std::string ffn = j.value("feed_forward_proj", std::string("relu"));
  if (ffn == "relu") {
    c.set_feed_forward(ModelConfig::RELU);
  } else if (ffn == "gated-gelu") {
    c.set_feed_forward(ModelConfig::GATED_GELU);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": feed_forward_proj \"", ffn, "\" is not supported; allowed: relu, gated-gelu"));
  }
  c.set_tie_embeddings(j.value("tie_word_embeddings", true));
  return c;
}

absl::StatusOr<HfCheckpoint> ImportHf(const std::string& dir) {
  HfCheckpoint out;
  TY_ASSIGN_OR_RETURN(out.config, ReadHfConfig(dir + "/config.json"));
  const std::string weights = dir + "/model.safetensors";
  TY_ASSIGN_OR_RETURN(TensorMap hf, ReadTensors(weights));
  std::set<std::string> used;
  std::vector<std::string> problems;
  for (const NamePair& pair : HfNames(out.config)) {
    auto it = hf.find(pair.hf);
    if (it == hf.end()) {
      problems.push_back(absl::StrCat(weights, ": tensor \"", pair.hf, "\" is missing"));
      continue;
    }
    used.insert(pair.hf);
    out.tensors[pair.ours] = pair.transpose ? it->second.t().contiguous() : it->second;
  }
  // Copies of the shared embedding that some writers keep.
  for (const char* alias : {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}) {
    used.insert(alias);
  }
  if (out.config.tie_embeddings()) used.insert("lm_head.weight");
  for (const auto& [name, tensor] : hf) {
    if (!used.count(name)) {
      problems.push_back(absl::StrCat(weights, ": tensor \"", name, "\" is not part of a T5 with this config.json"));
    }
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  return out;
}

absl::Status ExportHf(T5Impl& model, const std::string& out_dir) {
  mkdir(out_dir.c_str(), 0755);
  const ModelConfig& c = model.config();
  auto params = model.named_parameters();
  std::vector<torch::Tensor> keep;
  std::vector<SafeTensorView> views;
  for (const NamePair& pair : HfNames(c)) {
    const torch::Tensor* p = params.find(pair.ours);
    if (p == nullptr) return absl::InternalError(absl::StrCat("model has no parameter ", pair.ours));
    torch::Tensor t = p->detach().to(torch::kCPU).to(torch::kFloat);
    t = (pair.transpose ? t.t() : t).contiguous();
    keep.push_back(t);
    views.push_back({pair.hf, SafeDtype::kF32, t.sizes().vec(), t.data_ptr()});
  }
  TY_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", views, {{"format", "pt"}}));
  const bool gated = c.feed_forward() == ModelConfig::GATED_GELU;
  nlohmann::ordered_json j = {
      {"architectures", {"T5ForConditionalGeneration"}},
      {"model_type", "t5"},
      {"vocab_size", c.vocab_size()},
      {"d_model", c.d_model()},
      {"d_kv", c.d_kv()},
      {"d_ff", c.d_ff()},
      {"num_layers", c.num_encoder_layers()},
      {"num_decoder_layers", c.num_decoder_layers()},
      {"num_heads", c.num_heads()},
      {"relative_attention_num_buckets", c.relative_attention_num_buckets()},
      {"relative_attention_max_distance", c.relative_attention_max_distance()},
      {"dropout_rate", c.dropout_rate()},
      {"layer_norm_epsilon", c.layer_norm_epsilon()},
      {"feed_forward_proj", gated ? "gated-gelu" : "relu"},
      {"tie_word_embeddings", c.tie_embeddings()},
      {"is_encoder_decoder", true},
      {"pad_token_id", 0},
      {"eos_token_id", 1},
      {"decoder_start_token_id", 0},
  };
  const std::string path = out_dir + "/config.json";
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WriteModelCheckpoint(T5Impl& model, const std::string& dir, int64_t step, const std::string& source,
                                  const std::string& vocabulary_path, int vocabulary_extra_ids) {
  std::string vocabulary;
  if (!vocabulary_path.empty()) {
    TY_ASSIGN_OR_RETURN(vocabulary, ReadVocabularyFile(vocabulary_path));
  }
  TY_ASSIGN_OR_RETURN(CheckpointWriter writer, CheckpointWriter::Begin(dir));
  auto write = [&]() -> absl::Status {
    TY_RETURN_IF_ERROR(SaveParameters(model, writer.Path("params.safetensors")));
    nlohmann::ordered_json meta = {
        {"format", "trainyard.checkpoint"},
        {"version", 1},
        {"step", step},
        {"model_config", nlohmann::json::parse(ModelConfigJson(model.config()))},
        {"source", source},
    };
    TY_RETURN_IF_ERROR(WriteCheckpointVocabulary(&writer, vocabulary, vocabulary_extra_ids, &meta));
    return writer.Commit(meta.dump(2) + "\n");
  };
  absl::Status status = write();
  if (!status.ok()) writer.Abort();
  return status;
}

absl::StatusOr<CheckpointHeader> ReadCheckpointHeader(const std::string& dir) {
  TY_ASSIGN_OR_RETURN(CheckpointContents contents, VerifyCheckpoint(dir));
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(contents.metadata_json);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.json: not JSON: ", e.what()));
  }
  if (meta.value("format", "") != "trainyard.checkpoint" || !meta.contains("model_config")) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/metadata.json: not a Trainyard checkpoint (format \"", meta.value("format", ""), "\")"));
  }
  CheckpointHeader header;
  header.metadata_json = std::move(contents.metadata_json);
  try {
    header.version = meta.value("version", 1);
    header.step = meta.value("step", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.json: ", e.what()));
  }
  auto parsed = google::protobuf::util::JsonStringToMessage(meta["model_config"].dump(), &header.config);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.json: model_config: ", parsed.message().as_string()));
  }
  return header;
}

std::string ParameterShardFile(int shard, int num_shards) {
  return absl::StrFormat("params-%05d-of-%05d.safetensors", shard, num_shards);
}

absl::StatusOr<TensorMap> ReadCheckpointParameters(const std::string& dir, int param_shards,
                                                   const std::function<bool(const std::string&)>& keep) {
  if (param_shards < 0 || param_shards > 1 << 20) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.json: param_shards ", param_shards));
  }
  if (param_shards == 0) return ReadTensors(dir + "/params.safetensors", keep);
  TensorMap params;
  std::set<std::string> seen;
  for (int r = 0; r < param_shards; ++r) {
    const std::string file = ParameterShardFile(r, param_shards);
    std::vector<std::string> names;
    TY_ASSIGN_OR_RETURN(TensorMap part, ReadTensors(dir + "/" + file, keep, &names));
    for (const std::string& name : names) {
      if (!seen.insert(name).second) {
        return absl::DataLossError(absl::StrCat(dir, "/", file, ": ", name, " is in another shard too"));
      }
    }
    params.merge(part);
  }
  return params;
}

absl::StatusOr<ModelCheckpoint> ReadModelCheckpoint(const std::string& dir) {
  TY_ASSIGN_OR_RETURN(CheckpointHeader header, ReadCheckpointHeader(dir));
  ModelCheckpoint out;
  int param_shards = 0;
  try {
    const nlohmann::json meta = nlohmann::json::parse(header.metadata_json);
    param_shards = meta.value("param_shards", 0);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(dir, "/metadata.json: ", e.what()));
  }
  out.step = header.step;
  out.config = header.config;
  TY_ASSIGN_OR_RETURN(CheckpointVocabulary vocabulary, ReadCheckpointVocabulary(dir));
  out.vocabulary = vocabulary.path;
  out.vocabulary_extra_ids = vocabulary.extra_ids;
  TY_ASSIGN_OR_RETURN(out.tensors, ReadCheckpointParameters(dir, param_shards));
  return out;
}

}  // namespace trainyard
