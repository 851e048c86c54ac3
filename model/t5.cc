#include "model/t5.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#include <torch/version.h>

#include <cmath>
#include <string>
#include <utility>

#include "model/fused.h"
#include "model/parameter_storage.h"

namespace trainyard {
namespace {

constexpr float kMaskValue = -1e10f;

c10::optional<at::Generator> MaybeGenerator(const ForwardOptions& options) {
  if (options.generator.defined()) return options.generator;
  return c10::nullopt;
}

// Inverted dropout with masks from the step's generator.
torch::Tensor Dropout(const torch::Tensor& x, double rate, const ForwardOptions& options) {
  if (!options.train || rate <= 0.0) return x;
  torch::Tensor keep = torch::empty_like(x).bernoulli_(1.0 - rate, MaybeGenerator(options));
  return x * keep / (1.0 - rate);
}

torch::Tensor ToBias(const torch::Tensor& allowed) {
  return torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(torch::kFloat).device(allowed.device()))
      .masked_fill_(allowed.logical_not(), kMaskValue);
}

// [B, Lq, Lk] segment equality, or undefined when not packed.
torch::Tensor SameSegment(const torch::Tensor& q_segments, const torch::Tensor& k_segments) {
  if (!q_segments.defined() || !k_segments.defined()) return torch::Tensor();
  return q_segments.unsqueeze(-1).eq(k_segments.unsqueeze(-2));
}

torch::Tensor PairMask(const torch::Tensor& q_valid, const torch::Tensor& k_valid, const torch::Tensor& same_segment) {
  torch::Tensor m = q_valid.unsqueeze(-1).logical_and(k_valid.unsqueeze(-2));
  if (same_segment.defined()) m = m.logical_and(same_segment);
  return m;
}

}  // namespace

DenseImpl::DenseImpl(int64_t in, int64_t out, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out, in}, options));
}

torch::Tensor DenseImpl::forward(const torch::Tensor& x) { return torch::linear(x, weight.to(x.scalar_type())); }

EmbedImpl::EmbedImpl(int64_t vocab, int64_t dim, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({vocab, dim}, options));
}

torch::Tensor EmbedImpl::forward(const torch::Tensor& tokens) { return torch::embedding(weight, tokens); }

RmsNormImpl::RmsNormImpl(int64_t dim, double epsilon, const torch::TensorOptions& options) : epsilon(epsilon) {
  scale = register_parameter("scale", torch::empty({dim}, options));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x, torch::ScalarType dtype) {
  if (fused::RmsNormApplies(x, scale)) {
    torch::Tensor y = fused::RmsNorm(x, scale, epsilon);
    return y.scalar_type() == dtype ? y : y.to(dtype);
  }
  torch::Tensor x32 = x.to(torch::kFloat);
  torch::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return (x32 * torch::rsqrt(variance + epsilon) * scale).to(dtype);
}

torch::Tensor RelativePositionBucket(const torch::Tensor& relative_position, bool bidirectional, int64_t num_buckets,
                                     int64_t max_distance) {
  torch::Tensor buckets = torch::zeros_like(relative_position);
  torch::Tensor n = relative_position;
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + n.gt(0).to(torch::kLong) * num_buckets;
    n = n.abs();
  } else {
    n = (-n).clamp_min(0);
  }
  // Half the buckets are exact distances; the rest grow logarithmically up
  // to max_distance.
  const int64_t max_exact = num_buckets / 2;
  torch::Tensor is_small = n.lt(max_exact);
  torch::Tensor large = max_exact + (torch::log(n.clamp_min(1).to(torch::kFloat) / static_cast<float>(max_exact)) /
                                     std::log(static_cast<float>(max_distance) / static_cast<float>(max_exact)) *
                                     static_cast<float>(num_buckets - max_exact))
                                        .to(torch::kLong);
  large = large.clamp_max(num_buckets - 1);
  return buckets + torch::where(is_small, n, large);
}

RelativePositionBiasImpl::RelativePositionBiasImpl(const ModelConfig& config, bool bidirectional,
                                                   const torch::TensorOptions& options)
    : num_buckets(config.relative_attention_num_buckets()),
      max_distance(config.relative_attention_max_distance()),
      bidirectional(bidirectional) {
  rel_embedding = register_parameter("rel_embedding", torch::empty({config.num_heads(), num_buckets}, options));
}

torch::Tensor RelativePositionBiasImpl::Buckets(int64_t qlen, int64_t klen, int64_t q_offset) {
  const bool keep = q_offset == 0;
  if (keep) {
    absl::MutexLock lock(&mu_);
    auto it = buckets_.find({qlen, klen});
    if (it != buckets_.end() && it->second.device() == rel_embedding.device()) return it->second;
  }
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(rel_embedding.device());
  torch::Tensor context = torch::arange(q_offset, q_offset + qlen, long_options).unsqueeze(1);
  torch::Tensor memory = torch::arange(klen, long_options).unsqueeze(0);
  torch::Tensor buckets = RelativePositionBucket(memory - context, bidirectional, num_buckets, max_distance).flatten();
  if (keep) {
    absl::MutexLock lock(&mu_);
    // Lengths vary little in training (fixed feature lengths); a scoring
    // service with many lengths starts over rather than growing.
    constexpr size_t kMaxKept = 64;
    if (buckets_.size() >= kMaxKept) buckets_.clear();
    buckets_[{qlen, klen}] = buckets;
  }
  return buckets;
}

torch::Tensor RelativePositionBiasImpl::forward(int64_t qlen, int64_t klen, int64_t q_offset) {
  torch::Tensor buckets = Buckets(qlen, klen, q_offset);
  return rel_embedding.index_select(1, buckets)
      .view({rel_embedding.size(0), qlen, klen})
      .to(torch::kFloat)
      .unsqueeze(0);
}

AttentionImpl::AttentionImpl(const ModelConfig& config, const torch::TensorOptions& options)
    : num_heads(config.num_heads()), d_kv(config.d_kv()), dropout_rate(config.dropout_rate()) {
  const int64_t inner = num_heads * d_kv;
  query = register_module("query", Dense(config.d_model(), inner, options));
  key = register_module("key", Dense(config.d_model(), inner, options));
  value = register_module("value", Dense(config.d_model(), inner, options));
  out = register_module("out", Dense(inner, config.d_model(), options));
}

std::pair<torch::Tensor, torch::Tensor> AttentionImpl::Project(const torch::Tensor& kv) {
  const int64_t b = kv.size(0), l = kv.size(1);
  return {key(kv).view({b, l, num_heads, d_kv}).transpose(1, 2),
          value(kv).view({b, l, num_heads, d_kv}).transpose(1, 2)};
}

torch::Tensor AttentionImpl::Attend(const torch::Tensor& x, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& bias, const ForwardOptions& options) {
  const int64_t b = x.size(0), lq = x.size(1);
  torch::Tensor q = query(x).view({b, lq, num_heads, d_kv}).transpose(1, 2);
#if TORCH_VERSION_MAJOR >= 2
  // On a GPU, one fused kernel (LibTorch's scaled-dot-product attention:
  // the memory-efficient kernel takes an additive bias and its gradient)
  // instead of four. The relative-position bias and the padding masks are
  // that bias, in the compute type; scale 1 as below. Attention dropout
  // stays on the unfused path: its masks must come from the step's own
  // generator.
  if (x.is_cuda() && !(options.train && dropout_rate > 0)) {
    torch::Tensor y = at::scaled_dot_product_attention(q, k, v, bias.to(q.scalar_type()), /*dropout_p=*/0.0,
                                                       /*is_causal=*/false, /*scale=*/1.0);
    return out(y.transpose(1, 2).reshape({b, lq, num_heads * d_kv}));
  }
#endif
  // No 1/sqrt(d_kv): T5 folds it into the query initialisation.
  torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2)).to(torch::kFloat) + bias;
  torch::Tensor weights = torch::softmax(scores, -1).to(x.scalar_type());
  weights = Dropout(weights, dropout_rate, options);
  torch::Tensor y = torch::matmul(weights, v).transpose(1, 2).reshape({b, lq, num_heads * d_kv});
  return out(y);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& kv, const torch::Tensor& bias,
                                     const ForwardOptions& options) {
  auto [k, v] = Project(kv);
  return Attend(x, k, v, bias, options);
}

MlpImpl::MlpImpl(const ModelConfig& config, const torch::TensorOptions& options)
    : gated(config.feed_forward() == ModelConfig::GATED_GELU), dropout_rate(config.dropout_rate()) {
  if (gated) {
    wi_0 = register_module("wi_0", Dense(config.d_model(), config.d_ff(), options));
    wi_1 = register_module("wi_1", Dense(config.d_model(), config.d_ff(), options));
  } else {
    wi = register_module("wi", Dense(config.d_model(), config.d_ff(), options));
  }
  wo = register_module("wo", Dense(config.d_ff(), config.d_model(), options));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, const ForwardOptions& options) {
  torch::Tensor h;
  if (gated) {
    torch::Tensor a = wi_0(x), b = wi_1(x);
    h = fused::GatedGeluApplies(a, b) ? fused::GatedGelu(a, b) : torch::gelu(a, "tanh") * b;
  } else {
    h = torch::relu(wi(x));
  }
  return wo(Dropout(h, dropout_rate, options));
}

EncoderLayerImpl::EncoderLayerImpl(const ModelConfig& config, const torch::TensorOptions& options)
    : dropout_rate(config.dropout_rate()) {
  const double eps = config.layer_norm_epsilon();
  pre_attention_layer_norm = register_module("pre_attention_layer_norm", RmsNorm(config.d_model(), eps, options));
  attention = register_module("attention", Attention(config, options));
  pre_mlp_layer_norm = register_module("pre_mlp_layer_norm", RmsNorm(config.d_model(), eps, options));
  mlp = register_module("mlp", Mlp(config, options));
}

torch::Tensor EncoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& bias,
                                        const ForwardOptions& options) {
  const auto dtype = x.scalar_type();
  torch::Tensor h = pre_attention_layer_norm(x, dtype);
  torch::Tensor y = x + Dropout(attention(h, h, bias, options), dropout_rate, options);
  return y + Dropout(mlp(pre_mlp_layer_norm(y, dtype), options), dropout_rate, options);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& config, const torch::TensorOptions& options)
    : dropout_rate(config.dropout_rate()) {
  const double eps = config.layer_norm_epsilon();
  const int64_t d = config.d_model();
  pre_self_attention_layer_norm = register_module("pre_self_attention_layer_norm", RmsNorm(d, eps, options));
  self_attention = register_module("self_attention", Attention(config, options));
  pre_cross_attention_layer_norm = register_module("pre_cross_attention_layer_norm", RmsNorm(d, eps, options));
  encoder_decoder_attention = register_module("encoder_decoder_attention", Attention(config, options));
  pre_mlp_layer_norm = register_module("pre_mlp_layer_norm", RmsNorm(d, eps, options));
  mlp = register_module("mlp", Mlp(config, options));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& self_bias,
                                        const torch::Tensor& encoded, const torch::Tensor& cross_bias,
                                        const ForwardOptions& options) {
  const auto dtype = x.scalar_type();
  torch::Tensor h = pre_self_attention_layer_norm(x, dtype);
  torch::Tensor y = x + Dropout(self_attention(h, h, self_bias, options), dropout_rate, options);
  h = pre_cross_attention_layer_norm(y, dtype);
  y = y + Dropout(encoder_decoder_attention(h, encoded, cross_bias, options), dropout_rate, options);
  return y + Dropout(mlp(pre_mlp_layer_norm(y, dtype), options), dropout_rate, options);
}

torch::Tensor DecoderLayerImpl::Step(const torch::Tensor& x, int64_t step, KvCache* cache,
                                     const torch::Tensor& self_bias, const torch::Tensor& cross_key,
                                     const torch::Tensor& cross_value, const torch::Tensor& cross_bias,
                                     const ForwardOptions& options) {
  const auto dtype = x.scalar_type();
  torch::Tensor h = pre_self_attention_layer_norm(x, dtype);
  auto [k, v] = self_attention->Project(h);
  cache->key.narrow(2, step, 1).copy_(k);
  cache->value.narrow(2, step, 1).copy_(v);
  torch::Tensor y = x + self_attention->Attend(h, cache->key.narrow(2, 0, step + 1),
                                               cache->value.narrow(2, 0, step + 1), self_bias, options);
  h = pre_cross_attention_layer_norm(y, dtype);
  y = y + encoder_decoder_attention->Attend(h, cross_key, cross_value, cross_bias, options);
  return y + mlp(pre_mlp_layer_norm(y, dtype), options);
}

void DecodeState::Reorder(const torch::Tensor& index) {
  encoded = encoded.index_select(0, index);
  cross_bias = cross_bias.index_select(0, index);
  for (auto& t : cross_keys) t = t.index_select(0, index);
  for (auto& t : cross_values) t = t.index_select(0, index);
  for (KvCache& c : self_caches) {
    c.key = c.key.index_select(0, index);
    c.value = c.value.index_select(0, index);
  }
}

T5Impl::T5Impl(const ModelConfig& config, torch::Device device, uint64_t seed,
               const std::function<bool(const std::string&)>& hold)
    : config_(config) {
  const bool meta = device.type() == torch::kMeta;
  // Parameters are initialised on the CPU (one generator, reproducible on any
  // device) and moved afterwards.
  const auto options = torch::TensorOptions()
                           .dtype(torch::kFloat)
                           .device(meta ? torch::Device(torch::kMeta) : torch::Device(torch::kCPU));
  const int64_t d = config.d_model();
  token_embedder = register_module("token_embedder", Embed(config.vocab_size(), d, options));
  encoder_relpos = register_module("encoder_relpos", RelativePositionBias(config, /*bidirectional=*/true, options));
  decoder_relpos = register_module("decoder_relpos", RelativePositionBias(config, /*bidirectional=*/false, options));
  encoder_layers = register_module("encoder_layers", torch::nn::ModuleList());
  for (int i = 0; i < config.num_encoder_layers(); ++i) {
    encoder_layers->push_back(EncoderLayer(config, options));
  }
  // The encoder's final norm is registered with the encoder: gradient
  // buckets follow the reverse of this order and start strictly in turn
  // (trainer/gradient_reducer.h), and encoder_norm's gradient comes only
  // when backward reaches the encoder. Registered after the decoder, its
  // bucket would hold back every decoder layer's bucket until then.
  encoder_norm = register_module("encoder_norm", RmsNorm(d, config.layer_norm_epsilon(), options));
  decoder_layers = register_module("decoder_layers", torch::nn::ModuleList());
  for (int i = 0; i < config.num_decoder_layers(); ++i) {
    decoder_layers->push_back(DecoderLayer(config, options));
  }
  decoder_norm = register_module("decoder_norm", RmsNorm(d, config.layer_norm_epsilon(), options));
  if (!config.tie_embeddings()) {
    logits_dense = register_module("logits_dense", Dense(d, config.vocab_size(), options));
  }
  if (meta) return;

  // T5X's initialisation: embeddings N(0, 1); dense kernels fan-in scaled,
  // the query's further divided by sqrt(d_kv) (T5 does not scale attention
  // logits); layer-norm scales 1.
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double inner = static_cast<double>(config.num_heads()) * config.d_kv();
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    auto ends_with = [&](const char* suffix) {
      const std::string s(suffix);
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    const bool held = hold == nullptr || device != torch::Device(torch::kCPU) || hold(name);
    double stddev = 1.0;
    if (ends_with(".scale")) {
      if (held) {
        p.fill_(1.0);
      } else {
        ReleaseStorage(p);
      }
      continue;
    } else if (ends_with("query.weight")) {
      stddev = 1.0 / std::sqrt(d * static_cast<double>(config.d_kv()));
    } else if (ends_with("key.weight") || ends_with("value.weight") || ends_with("wi.weight") ||
               ends_with("wi_0.weight") || ends_with("wi_1.weight") || ends_with("rel_embedding")) {
      stddev = 1.0 / std::sqrt(static_cast<double>(d));
    } else if (ends_with("logits_dense.weight")) {
      // T5X: fan-in scaling (Hugging Face uses 1.0, which makes initial
      // logits of magnitude sqrt(d_model)).
      stddev = 1.0 / std::sqrt(static_cast<double>(d));
    } else if (ends_with("out.weight")) {
      stddev = 1.0 / std::sqrt(inner);
    } else if (ends_with("wo.weight")) {
      stddev = 1.0 / std::sqrt(static_cast<double>(config.d_ff()));
    }
    if (held) {
      p.normal_(0.0, stddev, gen);
    } else {
      // The generator moves on as if p were drawn, p's memory (allocated,
      // never written) goes.
      torch::empty_like(p).normal_(0.0, stddev, gen);
      ReleaseStorage(p);
    }
  }
  if (device != torch::Device(torch::kCPU)) to(device);
}

torch::Tensor T5Impl::EmbedTokens(const torch::Tensor& tokens, const ForwardOptions& options) {
  return token_embedder(tokens).to(options.compute_dtype);
}

torch::Tensor T5Impl::Logits(const torch::Tensor& y, const ForwardOptions& /*options*/) {
  if (config_.tie_embeddings()) {
    // The shared embedding is scaled for the output projection.
    const double scale = 1.0 / std::sqrt(static_cast<double>(config_.d_model()));
    return torch::matmul(y * scale, token_embedder->weight.to(y.scalar_type()).t()).to(torch::kFloat);
  }
  return logits_dense(y).to(torch::kFloat);
}

namespace {

void Announce(const ForwardOptions& options, int unit) {
  if (options.before_unit != nullptr) (*options.before_unit)(unit);
}

// Identity in forward; in backward, calls the hook with the unit's index
// before passing the gradient on, that is, before backward computes
// anything of the unit (every gradient of the unit's computation depends on
// its output's).
class UnitBoundary : public torch::autograd::Function<UnitBoundary> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t unit,
                               const std::function<void(int)>* hook) {
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["hook"] = reinterpret_cast<int64_t>(hook);
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* hook = reinterpret_cast<const std::function<void(int)>*>(ctx->saved_data["hook"].toInt());
    if (*hook) (*hook)(static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

// The end of a unit's forward computation: its output, marked for
// ForwardOptions::before_unit_backward, and the after_unit call. With the
// mark the output is a custom function's view, which autograd forbids to
// modify in place: nothing after a unit may (the tests with the hooks set
// would fail, not the plain ones).
torch::Tensor Finish(const ForwardOptions& options, int unit, torch::Tensor out) {
  if (options.before_unit_backward != nullptr && out.requires_grad()) {
    out = UnitBoundary::apply(out, static_cast<int64_t>(unit), options.before_unit_backward);
  }
  if (options.after_unit != nullptr) (*options.after_unit)(unit);
  return out;
}

}  // namespace

std::vector<std::vector<std::string>> T5Impl::UnitNames() const {
  // Named as named_parameters() names them, each under its module's prefix.
  auto names_of = [](const torch::nn::Module& module, const std::string& prefix) {
    std::vector<std::string> names;
    for (const auto& item : module.named_parameters()) names.push_back(prefix + "." + item.key());
    return names;
  };
  std::vector<std::vector<std::string>> units;
  units.push_back(names_of(*token_embedder, "token_embedder"));
  units.push_back(names_of(*encoder_relpos, "encoder_relpos"));
  int i = 0;
  for (const auto& layer : *encoder_layers) {
    units.push_back(names_of(*layer, "encoder_layers." + std::to_string(i++)));
  }
  units.push_back(names_of(*encoder_norm, "encoder_norm"));
  units.push_back(names_of(*decoder_relpos, "decoder_relpos"));
  i = 0;
  for (const auto& layer : *decoder_layers) {
    units.push_back(names_of(*layer, "decoder_layers." + std::to_string(i++)));
  }
  units.push_back(names_of(*decoder_norm, "decoder_norm"));
  if (!config_.tie_embeddings()) units.push_back(names_of(*logits_dense, "logits_dense"));
  return units;
}

torch::Tensor T5Impl::Encode(const T5Batch& batch, const ForwardOptions& options) {
  const torch::Tensor& tokens = batch.encoder_input_tokens;
  Announce(options, 0);
  torch::Tensor x = Dropout(EmbedTokens(tokens, options), config_.dropout_rate(), options);
  const int64_t len = tokens.size(1);
  Announce(options, 1);
  const torch::Tensor bias = Finish(options, 1, encoder_relpos(len, len) + EncoderSelfAttentionMask(batch));
  int i = 0;
  for (const auto& layer : *encoder_layers) {
    const int unit = EncoderLayerUnit(i++);
    Announce(options, unit);
    x = Finish(options, unit, layer->as<EncoderLayer>()->forward(x, bias, options));
  }
  Announce(options, EncoderNormUnit());
  x = Finish(options, EncoderNormUnit(), encoder_norm(x, options.compute_dtype));
  return Dropout(x, config_.dropout_rate(), options);
}

torch::Tensor T5Impl::forward(const T5Batch& batch, const ForwardOptions& options) {
  torch::Tensor encoded = Encode(batch, options);
  const torch::Tensor& inputs = batch.decoder_input_tokens;
  torch::Tensor y = Dropout(EmbedTokens(inputs, options), config_.dropout_rate(), options);
  const int64_t len = inputs.size(1);
  Announce(options, DecoderRelposUnit());
  const torch::Tensor self_bias =
      Finish(options, DecoderRelposUnit(), decoder_relpos(len, len) + DecoderSelfAttentionMask(batch));
  torch::Tensor cross_bias = CrossAttentionMask(batch);
  int i = 0;
  for (const auto& layer : *decoder_layers) {
    const int unit = DecoderLayerUnit(i++);
    Announce(options, unit);
    y = Finish(options, unit, layer->as<DecoderLayer>()->forward(y, self_bias, encoded, cross_bias, options));
  }
  Announce(options, DecoderNormUnit());
  y = Finish(options, DecoderNormUnit(), decoder_norm(y, options.compute_dtype));
  y = Dropout(y, config_.dropout_rate(), options);
  torch::Tensor logits;
  if (config_.tie_embeddings()) {
    logits = Logits(y, options);
  } else {
    Announce(options, LogitsUnit());
    logits = Finish(options, LogitsUnit(), Logits(y, options));
  }
  if (options.after_unit != nullptr) (*options.after_unit)(0);
  return logits;
}

DecodeState T5Impl::StartDecoding(const torch::Tensor& encoder_input_tokens, int64_t max_length,
                                  const ForwardOptions& options) {
  DecodeState state;
  T5Batch batch;
  batch.encoder_input_tokens = encoder_input_tokens;
  state.encoded = Encode(batch, options);
  state.cross_bias = ToBias(encoder_input_tokens.gt(0)).unsqueeze(1).unsqueeze(1);
  state.max_length = max_length;
  const int64_t b = encoder_input_tokens.size(0);
  const auto cache_options = torch::TensorOptions().dtype(options.compute_dtype).device(encoder_input_tokens.device());
  for (const auto& layer : *decoder_layers) {
    auto* decoder_layer = layer->as<DecoderLayer>();
    auto [k, v] = decoder_layer->encoder_decoder_attention->Project(state.encoded);
    state.cross_keys.push_back(k);
    state.cross_values.push_back(v);
    KvCache cache;
    cache.key = torch::zeros({b, config_.num_heads(), max_length, config_.d_kv()}, cache_options);
    cache.value = torch::zeros_like(cache.key);
    state.self_caches.push_back(std::move(cache));
  }
  return state;
}

torch::Tensor T5Impl::DecodeStep(const torch::Tensor& tokens, DecodeState* state, const ForwardOptions& options) {
  const int64_t t = state->step;
  TORCH_CHECK(t < state->max_length, "decoding past max_length ", state->max_length);
  torch::Tensor y = EmbedTokens(tokens.view({-1, 1}), options);
  // Causal by construction: the cache holds positions 0..t only.
  torch::Tensor self_bias = decoder_relpos(1, t + 1, t);
  int i = 0;
  for (const auto& layer : *decoder_layers) {
    y = layer->as<DecoderLayer>()->Step(y, t, &state->self_caches[i], self_bias, state->cross_keys[i],
                                        state->cross_values[i], state->cross_bias, options);
    ++i;
  }
  y = decoder_norm(y, options.compute_dtype);
  ++state->step;
  return Logits(y, options).squeeze(1);
}

int64_t T5Impl::NumParameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

torch::Tensor EncoderSelfAttentionMask(const T5Batch& batch) {
  torch::Tensor valid = batch.encoder_input_tokens.gt(0);
  return ToBias(PairMask(valid, valid, SameSegment(batch.encoder_segment_ids, batch.encoder_segment_ids))).unsqueeze(1);
}

torch::Tensor DecoderSelfAttentionMask(const T5Batch& batch) {
  torch::Tensor valid = batch.decoder_target_tokens.gt(0);
  const int64_t len = valid.size(1);
  torch::Tensor causal = torch::ones({len, len}, valid.options()).tril();
  torch::Tensor allowed =
      PairMask(valid, valid, SameSegment(batch.decoder_segment_ids, batch.decoder_segment_ids)).logical_and(causal);
  return ToBias(allowed).unsqueeze(1);
}

torch::Tensor CrossAttentionMask(const T5Batch& batch) {
  return ToBias(PairMask(batch.decoder_target_tokens.gt(0), batch.encoder_input_tokens.gt(0),
                         SameSegment(batch.decoder_segment_ids, batch.encoder_segment_ids)))
      .unsqueeze(1);
}

}  // namespace trainyard
