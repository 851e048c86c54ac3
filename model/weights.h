// Model parameters in and out of safetensors files: our own layout (T5X-like
// names, see model/t5.h) and Hugging Face's T5 layout (`model.safetensors` +
// `config.json` of T5ForConditionalGeneration, T5 v1.0 and v1.1 names).
//
// Loading is all-or-nothing: every tensor is checked (present, expected,
// right shape) before any parameter is written, so a bad file never leaves a
// half-loaded model. Errors name the file and the tensor.
#ifndef TRAINYARD_MODEL_WEIGHTS_H_
#define TRAINYARD_MODEL_WEIGHTS_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/t5.h"
#include "proto/job.pb.h"

namespace trainyard {

// Tensors by (our) parameter name, float32 on the CPU.
using TensorMap = std::map<std::string, torch::Tensor>;

// Reads the tensors of a safetensors file that `keep` accepts (every one
// when it is empty), converted to float32; the others are not copied out
// of the mapping. `names`, when not null, receives every tensor's name in
// the file, read or not.
absl::StatusOr<TensorMap> ReadTensors(const std::string& path,
                                      const std::function<bool(const std::string&)>& keep = nullptr,
                                      std::vector<std::string>* names = nullptr);

// Writes named tensors to a safetensors file, cast to `dtype` (kFloat or
// kBFloat16; kInvalidArgument otherwise).
absl::Status WriteTensorsAs(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                            torch::ScalarType dtype, const std::map<std::string, std::string>& metadata = {});

// Writes the model's parameters under their names, cast to `dtype`
// (kFloat or kBFloat16).
absl::Status SaveParameters(T5Impl& model, const std::string& path, torch::ScalarType dtype = torch::kFloat,
                            const std::map<std::string, std::string>& metadata = {});

// Copies `tensors` into the model's parameters. kInvalidArgument, naming the
// tensor, for a shape mismatch; for a missing parameter or an unused tensor
// when `strict` (otherwise those parameters keep their values). `hold`
// (null: every parameter) names the parameters this process holds (PARAMETERS
// sharding): the others are neither assigned nor missing, and a tensor of
// theirs counts as used.
absl::Status AssignParameters(const TensorMap& tensors, bool strict, T5Impl* model,
                              const std::function<bool(const std::string&)>& hold = nullptr);

// Hugging Face T5: config.json -> ModelConfig (d_model, d_kv, d_ff,
// num_layers, num_decoder_layers, num_heads, relative_attention_*,
// dropout_rate, layer_norm_epsilon, feed_forward_proj, tie_word_embeddings,
// vocab_size).
absl::StatusOr<ModelConfig> ReadHfConfig(const std::string& config_json_path);

// Reads HF_DIR/config.json and HF_DIR/model.safetensors and renames the
// tensors to ours. Unknown or missing tensors are kInvalidArgument.
struct HfCheckpoint {
  ModelConfig config;
  TensorMap tensors;
};
absl::StatusOr<HfCheckpoint> ImportHf(const std::string& hf_dir);

// Writes OUT_DIR/model.safetensors and OUT_DIR/config.json that
// transformers' T5ForConditionalGeneration.from_pretrained loads.
absl::Status ExportHf(T5Impl& model, const std::string& out_dir);

// A Trainyard checkpoint directory (checkpoint/checkpoint_dir.h) with the
// model's parameters: params.safetensors, metadata.json (format, version,
// step, model config, source) and, if given, the SentencePiece vocabulary
// with its extra ids (checkpoint/checkpoint_vocabulary.h). Atomic and
// checksummed.
absl::Status WriteModelCheckpoint(T5Impl& model, const std::string& dir, int64_t step, const std::string& source,
                                  const std::string& vocabulary_path, int vocabulary_extra_ids = 0);

// The parameters of a checkpoint directory: params.safetensors, or with
// `param_shards` > 0 (a checkpoint of data_parallel.sharding PARAMETERS,
// each rank's own parameters in its own file) the union of
// ParameterShardFile(r, param_shards) for every r; a name in two files is
// kDataLoss. Only the tensors `keep` accepts (null: all) are read; every
// name is still checked for duplicates.
absl::StatusOr<TensorMap> ReadCheckpointParameters(const std::string& dir, int param_shards,
                                                   const std::function<bool(const std::string&)>& keep = nullptr);
// "params-<r>-of-<W>.safetensors", 5 digits each.
std::string ParameterShardFile(int shard, int num_shards);

struct ModelCheckpoint {
  ModelConfig config;
  TensorMap tensors;
  int64_t step = 0;
  std::string vocabulary;  // path inside the checkpoint, or empty
  int vocabulary_extra_ids = 0;
};
// Verifies the manifest (kDataLoss naming a damaged file), then reads.
absl::StatusOr<ModelCheckpoint> ReadModelCheckpoint(const std::string& dir);

// What every Trainyard checkpoint's metadata.json has, read after the
// manifest verified (kNotFound without one, kDataLoss naming a damaged file;
// kInvalidArgument for a directory that is not a Trainyard checkpoint).
// A model config as checkpoints' metadata.json holds it (JSON text, proto
// field names, every field printed).
std::string ModelConfigJson(const ModelConfig& config);

struct CheckpointHeader {
  std::string metadata_json;  // the whole file, for format-specific fields
  int version = 1;
  int64_t step = 0;
  ModelConfig config;
};
absl::StatusOr<CheckpointHeader> ReadCheckpointHeader(const std::string& dir);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_WEIGHTS_H_
