#include "spec/presets.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

constexpr int kT5Vocab = 32128;  // 32000 SentencePiece pieces + 128 padding

struct Preset {
  const char* name;
  int vocab_size;
  int d_model;
  int num_heads;
  int d_kv;
  int d_ff;
  int layers;  // encoder and decoder alike
  bool v1_1;   // gated-GELU, untied output layer, no dropout by default
};

// T5X's configurations (t5x/examples/t5/t5_1_0 and t5_1_1 gin files).
constexpr Preset kPresets[] = {
    // A test-sized T5.1.1 for CPU tests and the demo (vocabulary of the
    // bundled task, padded to a multiple of 128).
    {"tiny", 512, 64, 4, 16, 256, 2, true},
    {"t5_small", kT5Vocab, 512, 8, 64, 2048, 6, false},
    {"t5_base", kT5Vocab, 768, 12, 64, 3072, 12, false},
    {"t5_large", kT5Vocab, 1024, 16, 64, 4096, 24, false},
    {"t5_3b", kT5Vocab, 1024, 32, 128, 16384, 24, false},
    {"t5_11b", kT5Vocab, 1024, 128, 128, 65536, 24, false},
    {"t5_1_1_small", kT5Vocab, 512, 6, 64, 1024, 8, true},
    {"t5_1_1_base", kT5Vocab, 768, 12, 64, 2048, 12, true},
    {"t5_1_1_large", kT5Vocab, 1024, 16, 64, 2816, 24, true},
    {"t5_1_1_xl", kT5Vocab, 2048, 32, 64, 5120, 24, true},
    {"t5_1_1_xxl", kT5Vocab, 4096, 64, 64, 10240, 24, true},
};

ModelConfig ToConfig(const Preset& p) {
  ModelConfig c;
  c.set_vocab_size(p.vocab_size);
  c.set_d_model(p.d_model);
  c.set_num_heads(p.num_heads);
  c.set_d_kv(p.d_kv);
  c.set_d_ff(p.d_ff);
  c.set_num_encoder_layers(p.layers);
  c.set_num_decoder_layers(p.layers);
  c.set_feed_forward(p.v1_1 ? ModelConfig::GATED_GELU : ModelConfig::RELU);
  c.set_tie_embeddings(!p.v1_1);
  // T5X trains T5.1.1 without dropout in pre-training; T5 v1.0 used 0.1.
  c.set_dropout_rate(p.v1_1 ? 0.0f : 0.1f);
  FillModelConfigDefaults(&c);
  return c;
}

}  // namespace

const std::vector<std::string>& PresetNames() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>;
    for (const Preset& p : kPresets) v->push_back(p.name);
    return v;
  }();
  return *names;
}

absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return ToConfig(p);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown preset \"", name, "\"; allowed: ", absl::StrJoin(PresetNames(), ", ")));
}

void FillModelConfigDefaults(ModelConfig* config) {
  if (config->feed_forward() == ModelConfig::FEED_FORWARD_UNSPECIFIED) {
    config->set_feed_forward(ModelConfig::RELU);
  }
  if (config->relative_attention_num_buckets() == 0) {
    config->set_relative_attention_num_buckets(32);
  }
  if (config->relative_attention_max_distance() == 0) {
    config->set_relative_attention_max_distance(128);
  }
  if (!config->has_dropout_rate()) config->set_dropout_rate(0.1f);
  if (!config->has_layer_norm_epsilon()) config->set_layer_norm_epsilon(1e-6f);
}

absl::StatusOr<ModelConfig> ResolveModelConfig(const ModelSpec& spec) {
  switch (spec.architecture_case()) {
    case ModelSpec::kPreset: {
      absl::StatusOr<ModelConfig> config = PresetConfig(spec.preset());
      if (!config.ok()) return config;
      if (spec.has_dropout_rate()) config->set_dropout_rate(spec.dropout_rate());
      if (spec.has_vocab_size()) config->set_vocab_size(spec.vocab_size());
      return config;
    }
    case ModelSpec::kConfig: {
      ModelConfig config = spec.config();
      FillModelConfigDefaults(&config);
      return config;
    }
    case ModelSpec::ARCHITECTURE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("model: set either `preset` or `config`");
}

int64_t CountParameters(const ModelConfig& c) {
  const int64_t d = c.d_model();
  const int64_t inner = static_cast<int64_t>(c.num_heads()) * c.d_kv();
  const int64_t attention = 4 * d * inner;  // q, k, v, o; no biases
  const int64_t ffn_inputs = c.feed_forward() == ModelConfig::GATED_GELU ? 2 : 1;
  const int64_t ffn = (ffn_inputs + 1) * d * c.d_ff();  // wi (or wi_0, wi_1) and wo
  const int64_t layer_norm = d;                         // scale only, no bias
  const int64_t relative_bias = static_cast<int64_t>(c.relative_attention_num_buckets()) * c.num_heads();

  const int64_t encoder_layer = attention + layer_norm + ffn + layer_norm;
  const int64_t decoder_layer = 2 * (attention + layer_norm) + ffn + layer_norm;
  const int64_t embedding = static_cast<int64_t>(c.vocab_size()) * d;

  int64_t total = embedding;
  if (!c.tie_embeddings()) total += embedding;  // separate output layer
  // Relative position biases live in the first layer of each stack and are
  // shared by the others; each stack ends with a final layer norm.
  total += c.num_encoder_layers() * encoder_layer + relative_bias + layer_norm;
  total += c.num_decoder_layers() * decoder_layer + relative_bias + layer_norm;
  return total;
}

double ForwardFlopsPerExample(const ModelConfig& c, int64_t inputs, int64_t targets) {
  const double d = c.d_model(), hq = static_cast<double>(c.num_heads()) * c.d_kv(), f = c.d_ff();
  const double V = c.vocab_size(), I = static_cast<double>(inputs), T = static_cast<double>(targets);
  const double mlp = c.feed_forward() == ModelConfig::GATED_GELU ? 3 * d * f : 2 * d * f;
  const double Le = c.num_encoder_layers(), Ld = c.num_decoder_layers();
  return 2 * T * d * V + 2 * I * Le * (4 * d * hq + mlp) + 2 * T * Ld * (8 * d * hq + mlp) +
         4 * hq * (Le * I * I + Ld * (T * T + T * I));
}

}  // namespace trainyard
