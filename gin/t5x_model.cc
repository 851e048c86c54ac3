#include "gin/t5x_converter.h"

#include <cctype>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace trainyard {
namespace gin_internal {

absl::Status Converter::MapModel(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Call> module, Callee(model, "module", {kTransformer}, true));
  if (!module) return absl::InvalidArgumentError(absl::StrCat(model.Shown(), ".module is not bound"));
  TY_ASSIGN_OR_RETURN(std::optional<Call> config, Callee(*module, "config", {kT5Config}, true));
  if (!config) return absl::InvalidArgumentError(absl::StrCat(module->Shown(), ".config is not bound"));
  TY_RETURN_IF_ERROR(MapNetwork(*config));
  TY_RETURN_IF_ERROR(MapVocabulary(model));
  TY_RETURN_IF_ERROR(MapOptimizer(model));
  TY_RETURN_IF_ERROR(MapDecoding(model));
  LossConfig* loss = spec_->mutable_loss();
  TY_ASSIGN_OR_RETURN(std::optional<double> z, Float(model, "z_loss", 0, 1));
  loss->set_z_loss(static_cast<float>(z.value_or(0.0)));  // EncoderDecoderModel's default
  TY_ASSIGN_OR_RETURN(std::optional<double> smoothing, Float(model, "label_smoothing", 0, 0.999));
  loss->set_label_smoothing(static_cast<float>(smoothing.value_or(0.0)));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> factor, Get(model, "loss_normalizing_factor"));
  if (!factor || factor->value.is_none()) {
    loss->set_normalization(LossConfig::NO_NORMALIZATION);  // T5X: the summed loss
  } else if (factor->value.is_number() && factor->value.number() > 0) {
    loss->set_normalization(LossConfig::CONSTANT);
    loss->set_normalizing_constant(static_cast<float>(factor->value.number()));
  } else if (factor->value.kind == GinValue::Kind::kString && factor->value.s == "NUM_REAL_TARGET_TOKENS") {
    loss->set_normalization(LossConfig::NUM_TARGET_TOKENS);
  } else {
    TY_RETURN_IF_ERROR(Refuse(*factor,
                              "Trainyard normalises by None (the sum), a positive constant or "
                              "'NUM_REAL_TARGET_TOKENS'"));
  }
  TY_RETURN_IF_ERROR(Expect(model, "feature_converter_cls", RefersTo("seqio.EncDecFeatureConverter"),
                            "Trainyard's feature converter is seqio's EncDecFeatureConverter"));
  return absl::OkStatus();
}

absl::Status Converter::MapNetwork(const Call& c) {
  ModelConfig* m = spec_->mutable_model()->mutable_config();
  struct IntField {
    const char* arg;
    void (ModelConfig::*set)(int32_t);
    int32_t t5x_default;
  };
  for (const IntField& f :
       {IntField{"vocab_size", &ModelConfig::set_vocab_size, 0}, IntField{"emb_dim", &ModelConfig::set_d_model, 512},
        IntField{"num_heads", &ModelConfig::set_num_heads, 8},
        IntField{"num_encoder_layers", &ModelConfig::set_num_encoder_layers, 6},
        IntField{"num_decoder_layers", &ModelConfig::set_num_decoder_layers, 6},
        IntField{"head_dim", &ModelConfig::set_d_kv, 64}, IntField{"mlp_dim", &ModelConfig::set_d_ff, 2048}}) {
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> v, Int(c, f.arg, 1, 1 << 22));
    if (!v && f.t5x_default == 0) {
      return absl::InvalidArgumentError(absl::StrCat(c.Shown(), ".", f.arg, " is not bound: T5Config requires it"));
    }
    (m->*f.set)(static_cast<int32_t>(v.value_or(f.t5x_default)));
  }
  TY_ASSIGN_OR_RETURN(std::optional<Bound> act, Get(c, "mlp_activations"));
  const std::string acts = act ? act->value.ToString() : "('relu',)";
  if (acts == "('relu',)" || acts == "['relu']") {
    m->set_feed_forward(ModelConfig::RELU);
  } else if (acts == "('gelu', 'linear')" || acts == "['gelu', 'linear']") {
    m->set_feed_forward(ModelConfig::GATED_GELU);
  } else {
    TY_RETURN_IF_ERROR(
        Refuse(*act, "Trainyard's feed-forward layers are ('relu',) (T5) and ('gelu', 'linear') (T5.1.1)"));
  }
  TY_ASSIGN_OR_RETURN(std::optional<double> dropout, Float(c, "dropout_rate", 0, 0.999));
  m->set_dropout_rate(static_cast<float>(dropout.value_or(0.1)));
  TY_ASSIGN_OR_RETURN(std::optional<bool> tie, Bool(c, "logits_via_embedding"));
  m->set_tie_embeddings(tie.value_or(false));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> dtype, Get(c, "dtype"));
  if (!dtype || dtype->value.ToString() == "'float32'" || RefersTo("jnp.float32")(dtype->value)) {
    spec_->set_dtype(FLOAT32);
  } else if (dtype->value.ToString() == "'bfloat16'" || RefersTo("jnp.bfloat16")(dtype->value)) {
    spec_->set_dtype(BFLOAT16);
  } else {
    TY_RETURN_IF_ERROR(Refuse(*dtype, "Trainyard computes in 'float32' or 'bfloat16'"));
  }
  return Expect(c, "float32_attention_logits", IsFalse,
                "Trainyard computes attention logits in the activations' dtype");
}

absl::Status Converter::MapVocabulary(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> in, Get(model, "input_vocabulary"));
  TY_ASSIGN_OR_RETURN(std::optional<Bound> out, Get(model, "output_vocabulary"));
  if (!in || !out) return absl::InvalidArgumentError(absl::StrCat(model.Shown(), ": both vocabularies must be bound"));
  if (in->value != out->value) {
    TY_RETURN_IF_ERROR(Refuse(*out, absl::StrCat("Trainyard's models share one vocabulary; the input's is ",
                                                 Quoted(in->value), " (", in->where.ToString(), ")")));
  }
  TY_ASSIGN_OR_RETURN(std::optional<Call> vocab, CalleeOf(*in, {kVocabulary}, true));
  if (!vocab) return absl::OkStatus();
  TY_ASSIGN_OR_RETURN(std::optional<Bound> file, Get(*vocab, "sentencepiece_model_file"));
  if (!file || file->value.kind != GinValue::Kind::kString) {
    if (file) return TypeError(*file, "a SentencePiece model's path");
    return absl::InvalidArgumentError(absl::StrCat(vocab->Shown(), ".sentencepiece_model_file is not bound"));
  }
  TY_RETURN_IF_ERROR(LocalPath(file->value.s, *file));
  vocabulary_ = file->value.s;
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> extra, Int(*vocab, "extra_ids", 0, 100000));
  extra_ids_ = extra;
  return Expect(*vocab, "normalizer_spec_overrides", IsNone, "Trainyard reads the model's own normalizer");
}

absl::Status Converter::MapOptimizer(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Call> opt, Callee(model, "optimizer_def", {kAdafactor, kAdamW, kChain}, true));
  if (!opt) return absl::InvalidArgumentError(absl::StrCat(model.Shown(), ".optimizer_def is not bound"));
  if (opt->name == kAdafactor) return MapAdafactor(*opt);
  if (opt->name == kAdamW) return MapAdamW(*opt);
  // optimizers.chain([optax.clip_by_global_norm(N), optimizers.adamw()...])
  TY_ASSIGN_OR_RETURN(std::optional<Bound> list, Get(*opt, "transformations"));
  if (!list || list->value.kind != GinValue::Kind::kList) {
    return absl::InvalidArgumentError(absl::StrCat(opt->Shown(), ".transformations: expected a list"));
  }
  bool optimizer = false;
  for (const GinValue& item : list->value.items) {
    Bound b{item, list->where, list->key};
    TY_ASSIGN_OR_RETURN(std::optional<Call> step, CalleeOf(b, {kClipByGlobalNorm, "optax.adamw"}, true));
    if (!step) continue;
    if (step->name == kClipByGlobalNorm) {
      TY_ASSIGN_OR_RETURN(std::optional<double> norm, Float(*step, "max_norm", 1e-9, 1e9));
      if (!norm) return absl::InvalidArgumentError(absl::StrCat(step->Shown(), ".max_norm is not bound"));
      spec_->mutable_optimizer()->set_max_grad_norm(static_cast<float>(*norm));
    } else {
      if (optimizer) return Refuse(b, "one optimizer per chain");
      optimizer = true;
      TY_RETURN_IF_ERROR(MapAdamW(*step));
    }
  }
  if (!optimizer) return Refuse(*list, "the chain holds no optimizer Trainyard converts (optax.adamw)");
  return absl::OkStatus();
}

absl::Status Converter::MapAdafactor(const Call& c) {
  Adafactor* a = spec_->mutable_optimizer()->mutable_adafactor();
  TY_ASSIGN_OR_RETURN(std::optional<double> decay, Float(c, "decay_rate", 0, 1));
  a->set_decay_rate(static_cast<float>(decay.value_or(0.8)));
  TY_ASSIGN_OR_RETURN(std::optional<double> clip, Float(c, "clipping_threshold", 0, 1e9));
  a->set_clipping_threshold(static_cast<float>(clip.value_or(1.0)));
  TY_ASSIGN_OR_RETURN(std::optional<bool> scale, Bool(c, "multiply_by_parameter_scale"));
  a->set_multiply_by_parameter_scale(scale.value_or(true));
  TY_ASSIGN_OR_RETURN(std::optional<double> eps1, Float(c, "epsilon1", 0, 1));
  a->set_epsilon1(static_cast<float>(eps1.value_or(1e-30)));
  TY_ASSIGN_OR_RETURN(std::optional<double> eps2, Float(c, "epsilon2", 0, 1));
  a->set_epsilon2(static_cast<float>(eps2.value_or(1e-3)));
  TY_ASSIGN_OR_RETURN(std::optional<double> beta1, Float(c, "beta1", 0, 1));
  if (beta1) a->set_beta1(static_cast<float>(*beta1));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> min_dim, Int(c, "min_dim_size_to_factor", 0, 1 << 30));
  a->set_min_dim_size_to_factor(static_cast<int32_t>(min_dim.value_or(128)));
  TY_ASSIGN_OR_RETURN(std::optional<double> wd, Float(c, "weight_decay_rate", 0, 1));
  a->set_weight_decay_rate(static_cast<float>(wd.value_or(0.0)));
  TY_RETURN_IF_ERROR(Expect(c, "step_offset", IsZero, "Trainyard's Adafactor counts steps from 0"));
  TY_RETURN_IF_ERROR(Expect(c, "factored", IsTrue, "Trainyard's Adafactor factors every matrix"));
  TY_RETURN_IF_ERROR(Expect(c, "weight_decay_rate_lr_exponent", IsNone, "not in Trainyard's Adafactor"));
  TY_RETURN_IF_ERROR(Expect(c, "factor_map", IsNone, "Trainyard factors by the matrices' own rows and columns"));
  TY_RETURN_IF_ERROR(Expect(
      c, "dtype_momentum", [](const GinValue& v) { return v.ToString() == "'float32'"; },
      "Trainyard keeps the momentum in float32"));
  return Note(c, "logical_factor_rules", "names the axes for partitioning; Trainyard factors rows and columns");
}

absl::Status Converter::MapAdamW(const Call& c) {
  AdamW* a = spec_->mutable_optimizer()->mutable_adamw();
  TY_ASSIGN_OR_RETURN(std::optional<double> b1, Float(c, "b1", 0, 1));
  a->set_beta1(static_cast<float>(b1.value_or(0.9)));
  TY_ASSIGN_OR_RETURN(std::optional<double> b2, Float(c, "b2", 0, 1));
  a->set_beta2(static_cast<float>(b2.value_or(0.999)));
  TY_ASSIGN_OR_RETURN(std::optional<double> eps, Float(c, "eps", 0, 1));
  a->set_epsilon(static_cast<float>(eps.value_or(1e-8)));
  TY_ASSIGN_OR_RETURN(std::optional<double> wd, Float(c, "weight_decay", 0, 1));
  a->set_weight_decay(static_cast<float>(wd.value_or(1e-4)));  // optax.adamw's default
  return Expect(c, "learning_rate", IsNone,
                "the learning rate comes from trainer.Trainer.learning_rate_fn (T5X wraps optax optimizers so)");
}

absl::Status Converter::MapDecoding(const Call& model) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> fn, Get(model, "decode_fn"));
  InferenceConfig* inference = spec_->mutable_inference();
  if (!fn || RefersTo(kBeamSearch)(fn->value)) {
    inference->set_method(InferenceConfig::BEAM);  // EncoderDecoderModel's default
    Call beam{kBeamSearch, ""};
    called_.push_back(beam);
    TY_ASSIGN_OR_RETURN(std::optional<double> alpha, Float(beam, "alpha", 0, 100));
    inference->set_alpha(static_cast<float>(alpha.value_or(0.6)));
    return absl::OkStatus();
  }
  if (!RefersTo(kTemperatureSample)(fn->value)) {
    return Refuse(*fn, "Trainyard decodes with decoding.beam_search or decoding.temperature_sample");
  }
  inference->set_method(InferenceConfig::SAMPLE);
  Call sample{kTemperatureSample, ""};
  called_.push_back(sample);
  TY_ASSIGN_OR_RETURN(std::optional<double> temperature, Float(sample, "temperature", 0, 1e6));
  inference->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> topk, Int(sample, "topk", 0, 1 << 30));
  inference->set_top_k(static_cast<int32_t>(topk.value_or(1)));
  TY_ASSIGN_OR_RETURN(std::optional<double> topp, Float(sample, "topp", 0, 1));
  inference->set_top_p(static_cast<float>(topp.value_or(0.0)));
  return absl::OkStatus();
}

absl::Status Converter::MapTrainer(const Call& trainer) {
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> micro, Int(trainer, "num_microbatches", 1, 1 << 20));
  spec_->set_num_microbatches(static_cast<int32_t>(micro.value_or(1)));
  TY_ASSIGN_OR_RETURN(std::optional<Call> schedule, Callee(trainer, "learning_rate_fn", {kSchedule}, true));
  if (!schedule) return absl::InvalidArgumentError(absl::StrCat(trainer.Shown(), ".learning_rate_fn is not bound"));
  TY_RETURN_IF_ERROR(MapSchedule(*schedule));
  TY_ASSIGN_OR_RETURN(std::optional<Call> weights, Callee(trainer, "weight_metrics_computer", {kWeightMetrics}, true));
  if (weights) spec_->mutable_summary()->set_weight_metrics(true);
  return absl::OkStatus();
}

absl::Status Converter::MapSchedule(const Call& c) {
  LearningRateSchedule* lr = spec_->mutable_learning_rate();
  // Every field from T5X's create_learning_rate_scheduler's own defaults.
  TY_ASSIGN_OR_RETURN(std::optional<std::string> factors, String(c, "factors"));
  lr->set_factors(factors.value_or("constant * linear_warmup * rsqrt_decay"));
  TY_ASSIGN_OR_RETURN(std::optional<double> base, Float(c, "base_learning_rate", 0, 1e6));
  lr->set_base_learning_rate(static_cast<float>(base.value_or(0.5)));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> warmup, Int(c, "warmup_steps", 0, int64_t{1} << 40));
  lr->set_warmup_steps(warmup.value_or(1000));
  TY_ASSIGN_OR_RETURN(std::optional<double> decay, Float(c, "decay_factor", 0, 1e6));
  lr->set_decay_factor(static_cast<float>(decay.value_or(0.5)));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> per_decay, Int(c, "steps_per_decay", 0, int64_t{1} << 40));
  lr->set_steps_per_decay(per_decay.value_or(20000));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> cycle, Int(c, "steps_per_cycle", 0, int64_t{1} << 40));
  lr->set_steps_per_cycle(cycle.value_or(100000));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> offset, Int(c, "step_offset", 0, int64_t{1} << 40));
  lr->set_step_offset(offset.value_or(0));
  TY_ASSIGN_OR_RETURN(std::optional<double> floor, Float(c, "min_learning_rate", 0, 1e6));
  lr->set_min_learning_rate(static_cast<float>(floor.value_or(1e-8)));
  return absl::OkStatus();
}

}  // namespace gin_internal
}  // namespace trainyard
