// Test and benchmark helper: the `tiny` preset with Adafactor, a constant
// learning rate and the local collective, ready to train.
#ifndef TRAINYARD_TRAINER_TESTING_TINY_TRAINER_H_
#define TRAINYARD_TRAINER_TESTING_TINY_TRAINER_H_

#include <memory>

#include "model/encoder_decoder_model.h"
#include "spec/presets.h"
#include "trainer/sharded_optimizer.h"
#include "trainer/trainer.h"

namespace trainyard {

struct TinyTrainer {
  std::unique_ptr<EncoderDecoderModel> model;
  std::unique_ptr<Optimizer> optimizer;
  LocalCollective collective;
  std::unique_ptr<Trainer> trainer;
};

struct TinyTrainerOptions {
  float learning_rate = 0.05f;
  // With factors: this schedule instead of the constant learning_rate.
  LearningRateSchedule schedule;
  float dropout = 0.0f;
  uint64_t init_seed = 0;
  bool adamw = false;  // default Adafactor
  torch::Device device = torch::kCPU;
  torch::ScalarType compute_dtype = torch::kFloat32;
  Collective* collective = nullptr;  // nullptr: the TinyTrainer's own local one
  // A ShardedOptimizer over `collective` (ZeRO stage 1; with
  // trainer.shard_gradients, stage 2).
  bool shard_optimizer = false;
  TrainerOptions trainer;
};

inline std::unique_ptr<TinyTrainer> MakeTinyTrainer(const TinyTrainerOptions& options = {}) {
  auto t = std::make_unique<TinyTrainer>();
  ModelConfig config = *PresetConfig("tiny");
  config.set_dropout_rate(options.dropout);
  ModelOptions model_options;
  model_options.init_seed = options.init_seed;
  model_options.device = options.device;
  model_options.compute_dtype = options.compute_dtype;
  t->model = std::move(EncoderDecoderModel::Create(config, model_options)).value();
  NamedTensors params;
  for (const auto& p : t->model->named_parameters()) params.emplace_back(p.key(), p.value());
  OptimizerConfig optimizer;
  if (options.adamw) {
    optimizer.mutable_adamw();
  } else {
    optimizer.mutable_adafactor();
  }
  if (options.shard_optimizer) {
    t->optimizer = std::move(ShardedOptimizer::Create(optimizer, params, options.collective)).value();
  } else {
    t->optimizer = std::move(CreateOptimizer(optimizer, params)).value();
  }
  LearningRateSchedule lr = options.schedule;
  if (lr.factors().empty()) {
    lr.set_factors("constant");
    lr.set_base_learning_rate(options.learning_rate);
  }
  t->trainer = std::make_unique<Trainer>(t->model.get(), t->optimizer.get(), *LearningRateCallable::Create(lr),
                                         options.collective ? options.collective : &t->collective, options.trainer);
  return t;
}

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_TESTING_TINY_TRAINER_H_
