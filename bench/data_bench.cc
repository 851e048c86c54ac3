// Data pipeline throughput: examples/s through the whole pipeline (source,
// tokenisation, packing) for the bundled task on one thread, beside what a
// training step consumes: the same batches fed to the tiny model's
// forward+backward in the same run. The pipeline must outpace the step by a
// wide margin (>= 10x) so it never stalls training. Then the file readers
// side by side: the first examples of the bundled task's train split written
// as JSONL, TFRecord of tf.train.Example and GZIP TFRecord, each opened
// (indexed, every line or record checked) and read in order and in a
// shuffled order (as an epoch visits them). And one rank of --world reading
// its rows of unpacked global batches of --rows x --world rows (ELASTIC and
// data_parallel.reproducible): the whole batch sliced to its rows beside
// only its rows read (TaskIterator::NextRows), as T5 batches. Prints JSON
// lines.
//
// usage: data_bench [--batches 200] [--rows 8] [--inputs 128] [--targets 64]
//                   [--vocab data/vocab/digits_to_words.model] [--train_steps 5]
//                   [--reader_examples 200000] [--dir /tmp] [--world 4]
#include <ATen/Parallel.h>

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "client/flags.h"
#include "data/iterator.h"
#include "data/tfrecord.h"
#include "model/encoder_decoder_model.h"
#include "nlohmann/json.hpp"
#include "proto/tf_example.pb.h"
#include "spec/presets.h"
#include "trainer/task_batches.h"

namespace trainyard {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The first `examples` of the train split as JSONL, TFRecord and GZIP
// TFRecord files in `dir`: {path, bytes} per format.
std::vector<std::pair<std::string, int64_t>> WriteReaderFiles(const std::string& dir, int64_t examples) {
  const std::vector<std::string> paths = {dir + "/data_bench.jsonl", dir + "/data_bench.tfrecord",
                                          dir + "/data_bench.tfrecord.gz"};
  std::ofstream jsonl(paths[0], std::ios::binary), tfrecord(paths[1], std::ios::binary);
  gzFile gz = gzopen(paths[2].c_str(), "wb");
  auto source = std::move(DigitsToWordsSource("train")).value();
  for (int64_t i = 0; i < std::min(examples, source->size()); ++i) {
    const Example ex = *source->Get(i);
    jsonl << nlohmann::json(ex).dump() << "\n";
    tfexample::Example proto;
    for (const auto& [name, text] : ex) {
      (*proto.mutable_features()->mutable_feature())[name].mutable_bytes_list()->add_value(text);
    }
    const std::string record = FrameTfRecord(proto.SerializeAsString());
    tfrecord << record;
    gzwrite(gz, record.data(), static_cast<unsigned>(record.size()));
  }
  jsonl.close();
  tfrecord.close();
  gzclose(gz);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const std::string& p : paths) out.emplace_back(p, static_cast<int64_t>(std::filesystem::file_size(p)));
  return out;
}

// Opens each file and reads every example in order, then in a shuffled
// order (as an epoch visits them).
void ReaderBench(const std::string& dir, int64_t examples) {
  for (const auto& [path, bytes] : WriteReaderFiles(dir, examples)) {
    auto start = std::chrono::steady_clock::now();
    auto source =
        std::move(path.find(".tfrecord") != std::string::npos ? OpenTfRecordSource({path}) : OpenJsonlSource({path}))
            .value();
    const double open_seconds = Since(start);
    const int64_t n = source->size();
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    double seconds[2];
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
      start = std::chrono::steady_clock::now();
      int64_t chars = 0;
      for (int64_t i : order) chars += static_cast<int64_t>(source->Get(i)->at("targets").size());
      seconds[pass] = Since(start);
      if (chars == 0) std::abort();
    }
    std::printf(
        "{\"measure\": \"reader\", \"file\": \"%s\", \"examples\": %lld, \"file_bytes\": %lld, "
        "\"open_seconds\": %.3f, \"open_examples_per_second\": %.0f, \"in_order_examples_per_second\": %.0f, "
        "\"shuffled_examples_per_second\": %.0f}\n",
        std::filesystem::path(path).filename().c_str(), static_cast<long long>(n), static_cast<long long>(bytes),
        open_seconds, n / open_seconds, n / seconds[0], n / seconds[1]);
    std::filesystem::remove(path);
  }
}

// Rank 0 of `world` through `batches` unpacked global batches of rows x
// world rows: read whole and sliced to its rows, then only its rows read.
void ShareBench(const Task& task, IteratorOptions options, int batches, int world) {
  options.pack = false;
  options.rows *= world;
  const int64_t share = options.rows / world;
  double seconds[2];
  for (int rows_only = 0; rows_only < 2; ++rows_only) {
    TaskBatchIterator it(std::move(TaskIterator::Create(task, options)).value());
    (void)it.Next();  // warm-up
    const auto start = std::chrono::steady_clock::now();
    int64_t kept = 0;
    for (int i = 0; i < batches; ++i) {
      T5Batch b = rows_only ? *it.NextRows(0, share) : it.Next()->Slice(0, share);
      kept += b.batch_size();
    }
    seconds[rows_only] = Since(start);
    if (kept != share * batches) std::abort();
  }
  std::printf(
      "{\"measure\": \"global_batch_share\", \"world\": %d, \"global_rows\": %lld, \"share_rows\": %lld, "
      "\"whole_batch_ms\": %.4f, \"own_rows_ms\": %.4f, \"whole_to_own_ratio\": %.2f}\n",
      world, static_cast<long long>(options.rows), static_cast<long long>(share), 1e3 * seconds[0] / batches,
      1e3 * seconds[1] / batches, seconds[0] / seconds[1]);
}

int Main(const std::vector<std::string>& args) {
  int batches = 200, rows = 8, inputs = 128, targets = 64, train_steps = 5, reader_examples = 200000, world = 4;
  std::string vocab = "data/vocab/digits_to_words.model", dir = "/tmp";
  FlagSet flags("data_bench", "Data pipeline throughput beside a training step.");
  flags.AddInt("batches", &batches, "N", "batches to time");
  flags.AddInt("rows", &rows, "N", "rows per batch");
  flags.AddInt("inputs", &inputs, "N", "inputs length");
  flags.AddInt("targets", &targets, "N", "targets length");
  flags.AddInt("train_steps", &train_steps, "N", "timed tiny training steps");
  flags.AddString("vocab", &vocab, "PATH", "the bundled vocabulary");
  flags.AddInt("reader_examples", &reader_examples, "N", "examples in the readers' files (0: skip them)");
  flags.AddString("dir", &dir, "DIR", "where the readers' files are written (and removed)");
  flags.AddInt("world", &world, "N", "ranks sharing a global batch (the share measure)");
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
  ShareBench(*task, options, batches, std::max(world, 1));
  if (reader_examples > 0) ReaderBench(dir, reader_examples);
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) { return trainyard::Main(std::vector<std::string>(argv + 1, argv + argc)); }
