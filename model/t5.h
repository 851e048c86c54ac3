// The T5 encoder-decoder network in LibTorch (T5 v1.0 and T5.1.1), shaped
// after T5X's network.py:
//   - RMS layer norm (scale only, no bias), pre-norm residual blocks;
//   - attention without 1/sqrt(d) scaling (folded into the initialisation);
//   - relative position biases (bucketed, bidirectional in the encoder,
//     causal in the decoder), one table per stack, shared by its layers;
//   - no biases in dense layers; ReLU (v1.0) or gated-GELU (v1.1) MLPs;
//   - v1.0 ties the output layer to the embedding (and scales the decoder
//     output by d_model^-0.5); v1.1 has a separate `logits_dense`.
//
// Parameter names follow T5X's (with '.' separators), e.g.
// `encoder.layers.0.attention.query.weight`; weights use LibTorch's [out, in]
// layout. model/weights.h converts from and to Hugging Face names.
//
// On the CPU, RMS norm and the gated GELU run as fused kernels
// (model/fused.h); CUDA tensors take the ATen formulas.
//
// Thread-safety: a T5 module is not thread-safe; one thread drives it.
#ifndef TRAINYARD_MODEL_T5_H_
#define TRAINYARD_MODEL_T5_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "model/batch.h"
#include "proto/job.pb.h"

namespace trainyard {

// How one forward pass runs.
struct ForwardOptions {
  // Dropout on (training). Dropout masks are drawn from `generator`, so a
  // step's masks are a function of its seed alone.
  bool train = false;
  at::Generator generator;
  // Activations and matrix products in this type; parameters stay float32
  // and layer norms, softmax and logits are computed in float32.
  torch::ScalarType compute_dtype = torch::kFloat32;
  // Called with a unit's index (T5Impl::UnitNames) before the teacher-forced
  // pass (Encode, forward) first reads that unit's parameters, in increasing
  // order; not called by StartDecoding/DecodeStep. Sharded training gathers
  // the unit's parameters there (trainer/parameter_gatherer.h). Not owned;
  // null: no calls.
  const std::function<void(int)>* before_unit = nullptr;
  // Called with a unit's index after the pass's last read of that unit's
  // parameters, in increasing order; unit 0 (the token embedding, read by
  // the encoder, the decoder and, tied, the logits) at the end of the pass.
  // Not owned; null: no calls.
  const std::function<void(int)>* after_unit = nullptr;
  // With grad mode on: called with a unit's index when backward reaches the
  // unit, before any gradient of the unit's computation is computed (an
  // identity autograd function on the unit's output calls it). Every unit
  // but 0, whose output feeds several places, in decreasing order. Not
  // owned, and must outlive the backward pass; null: no calls.
  const std::function<void(int)>* before_unit_backward = nullptr;
};

// y = x W^T with W cast to x's type (so float32 master weights serve bf16).
class DenseImpl : public torch::nn::Module {
 public:
  DenseImpl(int64_t in, int64_t out, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;  // [out, in]
};
TORCH_MODULE(Dense);

// Token embeddings [vocab, d_model] (T5X's `token_embedder`).
class EmbedImpl : public torch::nn::Module {
 public:
  EmbedImpl(int64_t vocab, int64_t dim, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& tokens);
  torch::Tensor weight;
};
TORCH_MODULE(Embed);

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double epsilon, const torch::TensorOptions& options);
  // Normalised in float32, returned in `dtype`.
  torch::Tensor forward(const torch::Tensor& x, torch::ScalarType dtype);
  torch::Tensor scale;  // [dim]
  double epsilon;
};
TORCH_MODULE(RmsNorm);

class RelativePositionBiasImpl : public torch::nn::Module {
 public:
  RelativePositionBiasImpl(const ModelConfig& config, bool bidirectional, const torch::TensorOptions& options);
  // Bias [1, heads, qlen, klen] for queries at positions q_offset..q_offset+qlen-1
  // and keys at 0..klen-1.
  torch::Tensor forward(int64_t qlen, int64_t klen, int64_t q_offset = 0);
  torch::Tensor rel_embedding;  // [heads, buckets] (T5X's layout)
  int64_t num_buckets;
  int64_t max_distance;
  bool bidirectional;

 private:
  // The flattened bucket of every (query, key) pair depends only on the
  // lengths: kept per (qlen, klen) for full sequences (q_offset 0), on the
  // embedding's device. Decoding's one-query calls are not kept.
  torch::Tensor Buckets(int64_t qlen, int64_t klen, int64_t q_offset);
  absl::Mutex mu_;
  std::map<std::pair<int64_t, int64_t>, torch::Tensor> buckets_ ABSL_GUARDED_BY(mu_);
};
TORCH_MODULE(RelativePositionBias);

// T5's bucketing of relative positions (memory - query), as in T5X and
// Hugging Face. Exposed for tests.
torch::Tensor RelativePositionBucket(const torch::Tensor& relative_position, bool bidirectional, int64_t num_buckets,
                                     int64_t max_distance);

// Key/value cache of one self-attention layer during decoding.
struct KvCache {
  torch::Tensor key;    // [B, H, max_len, d_kv]
  torch::Tensor value;  // [B, H, max_len, d_kv]
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, const torch::TensorOptions& options);
  // x [B, Lq, D] attends to kv [B, Lk, D]; bias broadcasts to [B, H, Lq, Lk]
  // (position bias plus -1e10 on masked pairs).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& kv, const torch::Tensor& bias,
                        const ForwardOptions& options);
  // Keys/values of `kv` as [B, H, L, d_kv].
  std::pair<torch::Tensor, torch::Tensor> Project(const torch::Tensor& kv);
  // Attention with precomputed keys/values [B, H, Lk, d_kv].
  torch::Tensor Attend(const torch::Tensor& x, const torch::Tensor& key, const torch::Tensor& value,
                       const torch::Tensor& bias, const ForwardOptions& options);

  Dense query{nullptr}, key{nullptr}, value{nullptr}, out{nullptr};
  int64_t num_heads;
  int64_t d_kv;
  double dropout_rate;
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const ForwardOptions& options);
  bool gated;
  Dense wi{nullptr}, wi_0{nullptr}, wi_1{nullptr}, wo{nullptr};
  double dropout_rate;
};
TORCH_MODULE(Mlp);

class EncoderLayerImpl : public torch::nn::Module {
 public:
  EncoderLayerImpl(const ModelConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias, const ForwardOptions& options);
  RmsNorm pre_attention_layer_norm{nullptr}, pre_mlp_layer_norm{nullptr};
  Attention attention{nullptr};
  Mlp mlp{nullptr};
  double dropout_rate;
};
TORCH_MODULE(EncoderLayer);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, const torch::TensorOptions& options);
  // Full sequence (training/scoring).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& self_bias, const torch::Tensor& encoded,
                        const torch::Tensor& cross_bias, const ForwardOptions& options);
  // One position `step` with caches: x [B, 1, D].
  torch::Tensor Step(const torch::Tensor& x, int64_t step, KvCache* self_cache, const torch::Tensor& self_bias,
                     const torch::Tensor& cross_key, const torch::Tensor& cross_value, const torch::Tensor& cross_bias,
                     const ForwardOptions& options);
  RmsNorm pre_self_attention_layer_norm{nullptr}, pre_cross_attention_layer_norm{nullptr}, pre_mlp_layer_norm{nullptr};
  Attention self_attention{nullptr}, encoder_decoder_attention{nullptr};
  Mlp mlp{nullptr};
  double dropout_rate;
};
TORCH_MODULE(DecoderLayer);

// What decoding keeps between steps.
struct DecodeState {
  torch::Tensor encoded;                                // [B, Li, D]
  torch::Tensor cross_bias;                             // [B, 1, 1, Li]
  std::vector<torch::Tensor> cross_keys, cross_values;  // per layer
  std::vector<KvCache> self_caches;                     // per layer
  int64_t max_length = 0;
  int64_t step = 0;  // next position to decode

  // Keeps only rows `index` (a [B'] int64 tensor), e.g. to follow beams.
  void Reorder(const torch::Tensor& index);
};

class T5Impl : public torch::nn::Module {
 public:
  // Parameters are created on `device` (kMeta: shapes only, no memory) and
  // initialised as T5 is, from `seed`. `hold` (null: every parameter) names
  // the parameters this process keeps: the others' values are still drawn,
  // so the held ones equal the whole model's, but their memory is released
  // (model/parameter_storage.h) as soon as each is drawn, so the whole
  // model never exists here at once. Only on the CPU: on another device
  // every parameter is held.
  T5Impl(const ModelConfig& config, torch::Device device = torch::kCPU, uint64_t seed = 0,
         const std::function<bool(const std::string&)>& hold = nullptr);

  const ModelConfig& config() const { return config_; }

  // Encoder outputs [B, Li, D].
  torch::Tensor Encode(const T5Batch& batch, const ForwardOptions& options);
  // Teacher-forced logits [B, Lt, V], float32.
  torch::Tensor forward(const T5Batch& batch, const ForwardOptions& options);

  // Decoding with caches: StartDecoding encodes and allocates; each
  // DecodeStep feeds `tokens` [B] at position state->step and returns logits
  // [B, V] (float32) for the next position.
  DecodeState StartDecoding(const torch::Tensor& encoder_input_tokens, int64_t max_length,
                            const ForwardOptions& options);
  torch::Tensor DecodeStep(const torch::Tensor& tokens, DecodeState* state, const ForwardOptions& options);

  int64_t NumParameters() const;

  // The parameters' names in groups ("units"), in the order Encode and
  // forward first read them: the embedding, the encoder's position bias,
  // each encoder layer, the encoder's norm, the decoder's position bias,
  // each decoder layer, the decoder's norm, logits_dense (v1.1). Every
  // parameter is in exactly one unit.
  std::vector<std::vector<std::string>> UnitNames() const;

  Embed token_embedder{nullptr};
  RelativePositionBias encoder_relpos{nullptr}, decoder_relpos{nullptr};
  torch::nn::ModuleList encoder_layers{nullptr}, decoder_layers{nullptr};
  RmsNorm encoder_norm{nullptr}, decoder_norm{nullptr};
  Dense logits_dense{nullptr};  // v1.1 only

 private:
  torch::Tensor EmbedTokens(const torch::Tensor& tokens, const ForwardOptions& options);
  torch::Tensor Logits(const torch::Tensor& y, const ForwardOptions& options);
  // The units' indices in UnitNames, as Encode and forward announce them.
  int EncoderLayerUnit(int i) const { return 2 + i; }
  int EncoderNormUnit() const { return 2 + config_.num_encoder_layers(); }
  int DecoderRelposUnit() const { return EncoderNormUnit() + 1; }
  int DecoderLayerUnit(int i) const { return DecoderRelposUnit() + 1 + i; }
  int DecoderNormUnit() const { return DecoderRelposUnit() + 1 + config_.num_decoder_layers(); }
  int LogitsUnit() const { return DecoderNormUnit() + 1; }

  ModelConfig config_;
};
TORCH_MODULE(T5);

// Masks as additive biases: 0 where attention is allowed, -1e10 elsewhere.
// Encoder self-attention: both tokens real (and same segment when packed).
torch::Tensor EncoderSelfAttentionMask(const T5Batch& batch);
// Decoder self-attention: causal, both targets real, same segment.
torch::Tensor DecoderSelfAttentionMask(const T5Batch& batch);
// Decoder-to-encoder: target and input real, same segment.
torch::Tensor CrossAttentionMask(const T5Batch& batch);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_T5_H_
