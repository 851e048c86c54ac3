// Training throughput and model FLOPs utilisation of a preset on one device:
// the Trainer's steps (forward, backward, optimizer update) on fixed-shape
// random batches, timed after warm-up steps with the device synchronised.
// bench/gpu/run.sh runs it on a GPU machine beside bench/gpu/hf_peer.py.
//
// Model FLOPs per example: ForwardFlopsPerExample (spec/presets.h, the
// PaLM paper's appendix; the trainer's timing/mfu counts the same). MFU = 3 * forward * examples/s / peak
// (--peak-tflops, default the H200's dense bf16 989).
//
// usage: gpu_bench [--preset t5_1_1_base] [--device cuda:0] [--dtype bf16|fp32]
//                  [--batch 64] [--inputs 512] [--targets 128] [--steps 20]
//                  [--warmup 3] [--optimizer adamw|adafactor] [--peak-tflops 989]
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "client/flags.h"
#include "common/torch/device.h"
#include "model/encoder_decoder_model.h"
#include "spec/presets.h"
#include "trainer/trainer.h"

namespace trainyard {
namespace {

class RandomBatches : public BatchIterator {
 public:
  RandomBatches(int64_t batch, int64_t inputs, int64_t targets, int64_t vocab) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
    b_.encoder_input_tokens = torch::randint(2, vocab, {batch, inputs}, gen, torch::kLong);
    b_.decoder_target_tokens = torch::randint(2, vocab, {batch, targets}, gen, torch::kLong);
    b_.decoder_input_tokens = b_.decoder_target_tokens.roll(1, 1);
    b_.decoder_input_tokens.select(1, 0).fill_(0);
    b_.decoder_loss_weights = torch::ones({batch, targets});
  }
  absl::StatusOr<T5Batch> Next() override { return b_; }

 private:
  T5Batch b_;
};

int Main(int argc, char** argv) {
  std::string preset = "t5_1_1_base", device_name = "cuda:0", dtype = "bf16", optimizer = "adamw";
  int batch = 64, inputs = 512, targets = 128, steps = 20, warmup = 3;
  std::string peak = "989";
  FlagSet flags("gpu_bench [--preset NAME] [--device cuda:0]", "Training tokens/s and MFU on one device.");
  flags.AddString("preset", &preset, "NAME", "model preset");
  flags.AddString("device", &device_name, "DEVICE", "cpu, cuda or cuda:N");
  flags.AddString("dtype", &dtype, "bf16|fp32", "compute dtype (parameters stay float32)");
  flags.AddString("optimizer", &optimizer, "adamw|adafactor", "optimizer");
  flags.AddInt("batch", &batch, "N", "examples per step");
  flags.AddInt("inputs", &inputs, "N", "input length");
  flags.AddInt("targets", &targets, "N", "target length");
  flags.AddInt("steps", &steps, "N", "timed steps");
  flags.AddInt("warmup", &warmup, "N", "untimed steps first");
  flags.AddString("peak-tflops", &peak, "X", "the device's dense peak for the dtype (default 989)");
  std::vector<std::string> args(argv + 1, argv + argc), positional;
  if (absl::Status s = flags.Parse(args, &positional); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  double peak_tflops = 0;
  if (!absl::SimpleAtod(peak, &peak_tflops) || !(peak_tflops > 0)) {
    std::fprintf(stderr, "error: --peak-tflops: '%s'; expected a positive number\n", peak.c_str());
    return 2;
  }
  if (dtype != "bf16" && dtype != "fp32") {
    std::fprintf(stderr, "error: --dtype: '%s'; allowed: bf16, fp32\n", dtype.c_str());
    return 2;
  }
  absl::StatusOr<torch::Device> device = ParseDevice("--device", device_name);
  absl::StatusOr<ModelConfig> config = PresetConfig(preset);
  if (!device.ok() || !config.ok()) {
    std::fprintf(stderr, "error: %s\n",
                 std::string((device.ok() ? config.status() : device.status()).message()).c_str());
    return 2;
  }
  config->set_dropout_rate(0.0f);
  ModelOptions model_options;
  model_options.device = *device;
  model_options.compute_dtype = dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(*config, model_options);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  NamedTensors params;
  int64_t count = 0;
  for (const auto& p : (*model)->named_parameters()) {
    params.emplace_back(p.key(), p.value());
    count += p.value().numel();
  }
  OptimizerConfig oc;
  if (optimizer == "adafactor") {
    oc.mutable_adafactor();
  } else {
    oc.mutable_adamw();
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(oc, params);
  LearningRateSchedule schedule;
  schedule.set_factors("constant");
  schedule.set_base_learning_rate(1e-4f);
  absl::StatusOr<LearningRateCallable> lr = LearningRateCallable::Create(schedule);
  if (!opt.ok() || !lr.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string((opt.ok() ? lr.status() : opt.status()).message()).c_str());
    return 1;
  }
  LocalCollective local;
  Trainer trainer(model->get(), opt->get(), *lr, &local, TrainerOptions());
  RandomBatches batches(batch, inputs, targets, config->vocab_size());
  if (absl::Status s = trainer.Train(&batches, warmup).status(); !s.ok()) {
    std::fprintf(stderr, "error: warm-up: %s\n", s.ToString().c_str());
    return 1;
  }
  SynchronizeDevice(*device);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::map<std::string, double>> summary = trainer.Train(&batches, steps);
  SynchronizeDevice(*device);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!summary.ok()) {
    std::fprintf(stderr, "error: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  const double examples_per_second = static_cast<double>(batch) * steps / seconds;
  const double flops_per_second = 3 * ForwardFlopsPerExample(*config, inputs, targets) * examples_per_second;
  std::printf(
      "{\"system\": \"trainyard\", \"preset\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", "
      "\"optimizer\": \"%s\", \"parameters\": %lld, \"batch\": %d, \"inputs\": %d, \"targets\": %d, "
      "\"steps\": %d, \"seconds_per_step\": %.6f, \"tokens_per_second\": %.1f, "
      "\"target_tokens_per_second\": %.1f, \"model_tflops\": %.6g, \"mfu\": %.6g, \"loss\": %.4f}\n",
      preset.c_str(), device->str().c_str(), dtype.c_str(), optimizer.c_str(), static_cast<long long>(count), batch,
      inputs, targets, steps, seconds / steps, examples_per_second * (inputs + targets), examples_per_second * targets,
      flops_per_second / 1e12, flops_per_second / (peak_tflops * 1e12), summary->at("loss"));
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) { return trainyard::Main(argc, argv); }
