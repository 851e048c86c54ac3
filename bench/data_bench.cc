// Data pipeline throughput: examples/s through the whole pipeline (source,
// tokenisation, packing) for the bundled task on one thread, beside what a
// training step consumes: the same batches fed to the tiny model's
// forward+backward in the same run. The pipeline must outpace the step by a
// wide margin (>= 10x) so it never stalls training. Prints JSON lines.
//
// usage: data_bench [--batches 200] [--rows 8] [--inputs 128] [--targets 64]
//                   [--vocab data/vocab/digits_to_words.model] [--train_steps 5]
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "client/flags.h"
#include "data/iterator.h"
#include "model/encoder_decoder_model.h"
#include "spec/presets.h"
#include "trainer/task_batches.h"

namespace trainyard {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Main(const std::vector<std::string>& args) {
  int batches = 200, rows = 8, inputs = 128, targets = 64, train_steps = 5;
  std::string vocab = "data/vocab/digits_to_words.model";
  FlagSet flags("data_bench", "Data pipeline throughput beside a training step.");
  flags.AddInt("batches", &batches, "N", "batches to time");
  flags.AddInt("rows", &rows, "N", "rows per batch");
  flags.AddInt("inputs", &inputs, "N", "inputs length");
  flags.AddInt("targets", &targets, "N", "targets length");
  flags.AddInt("train_steps", &train_steps, "N", "timed tiny training steps");
  flags.AddString("vocab", &vocab, "PATH", "the bundled vocabulary");
  std::vector<std::string> positional;
  if (auto code = flags.ParseCommand(args, &positional, std::cout, std::cerr)) return *code;
  at::set_num_threads(1);

  TaskRegistry registry;
  absl::Status status = RegisterDigitsToWords(vocab, &registry);
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  const Task* task = *registry.Get("digits_to_words");
  IteratorOptions options;
  options.rows = rows;
  options.inputs_length = inputs;
  options.targets_length = targets;
  auto it = std::move(TaskIterator::Create(*task, options)).value();
  (void)it->Next();  // warm-up
  int64_t examples = 0, tokens = 0;
  auto start = std::chrono::steady_clock::now();
  std::vector<ConvertedBatch> kept;
  for (int i = 0; i < batches; ++i) {
    ConvertedBatch b = *it->Next();
    examples += b.examples;
    tokens += b.input_tokens + b.target_tokens;
    if (static_cast<int>(kept.size()) < train_steps + 1) kept.push_back(std::move(b));
  }
  const double data_seconds = Since(start);
  const double examples_per_second = examples / data_seconds;
  std::printf(
      "{\"measure\": \"pipeline\", \"task\": \"digits_to_words\", \"rows\": %d, \"inputs\": %d, "
      "\"targets\": %d, \"packed\": true, \"examples_per_batch\": %.2f, "
      "\"examples_per_second\": %.1f, \"tokens_per_second\": %.1f}\n",
      rows, inputs, targets, static_cast<double>(examples) / batches, examples_per_second, tokens / data_seconds);

  ModelConfig config = *PresetConfig("tiny");
  config.set_dropout_rate(0.0f);
  auto model = std::move(EncoderDecoderModel::Create(config, {})).value();
  auto step = [&](const ConvertedBatch& b) {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    auto out = model->LossFn(ToT5Batch(b), LossOptions(), at::Generator());
    out->loss.backward();
  };
  step(kept[0]);  // warm-up
  int64_t consumed = 0;
  start = std::chrono::steady_clock::now();
  for (int i = 1; i <= train_steps; ++i) {
    step(kept[i]);
    consumed += kept[i].examples;
  }
  const double step_seconds = Since(start) / train_steps;
  const double consumed_per_second = consumed / (step_seconds * train_steps);
  std::printf(
      "{\"measure\": \"tiny_train_step\", \"seconds_per_step\": %.4f, "
      "\"examples_per_second\": %.1f, \"pipeline_to_step_ratio\": %.1f}\n",
      step_seconds, consumed_per_second, examples_per_second / consumed_per_second);
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) { return trainyard::Main(std::vector<std::string>(argv + 1, argv + argc)); }
