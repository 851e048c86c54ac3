// How long a preset's training checkpoint takes, beside the disk's own
// speed for the same bytes in the same run: the training stall (the
// snapshot copied off the training buffers), the full write (safetensors,
// SHA-256 manifest, fsyncs, rename), the read-back with verification, and a
// plain write+fsync of a file of the same size. Prints one JSON line.
//
//   bazel build --config=opt //bench:checkpoint_bench
//   bazel-bin/bench/checkpoint_bench --preset t5_1_1_small --dir /tmp/ckpt-bench
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <torch/utils.h>

#include "client/flags.h"
#include "common/blas.h"
#include "model/encoder_decoder_model.h"
#include "spec/presets.h"
#include "trainer/optimizer.h"
#include "trainer/train_checkpoint.h"

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  trainyard::ReexecWithTunedBlas(argv);
  using namespace trainyard;
  std::string preset = "t5_1_1_small", dir = "/tmp/checkpoint-bench";
  FlagSet flags("checkpoint_bench [--preset NAME] [--dir DIR]", "Checkpoint write/read time vs the disk.");
  flags.AddString("preset", &preset, "NAME", "model preset (default t5_1_1_small)");
  flags.AddString("dir", &dir, "DIR", "where to write (default /tmp/checkpoint-bench; emptied)");
  std::vector<std::string> positional;
  if (auto code =
          flags.ParseCommand(std::vector<std::string>(argv + 1, argv + argc), &positional, std::cout, std::cerr)) {
    return *code;
  }
  torch::set_num_threads(1);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  absl::StatusOr<ModelConfig> config = PresetConfig(preset);
  if (!config.ok()) {
    std::cerr << config.status() << "\n";
    return 2;
  }
  auto model = std::move(EncoderDecoderModel::Create(*config, {})).value();
  NamedTensors params;
  for (const auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());
  OptimizerConfig oc;
  oc.mutable_adafactor();
  auto optimizer = std::move(CreateOptimizer(oc, params)).value();

  auto t = std::chrono::steady_clock::now();
  TrainSnapshot snapshot = MakeSnapshot(*model->network(), *optimizer, 1, 1, {"0 0"}, "", "bench");
  const double stall = Since(t);
  t = std::chrono::steady_clock::now();
  absl::Status written = WriteTrainCheckpoint(dir + "/checkpoint_1", snapshot, torch::kFloat);
  const double write = Since(t);
  if (!written.ok()) {
    std::cerr << written << "\n";
    return 1;
  }
  int64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/checkpoint_1")) bytes += entry.file_size();
  t = std::chrono::steady_clock::now();
  absl::StatusOr<TrainCheckpoint> read = ReadTrainCheckpoint(dir + "/checkpoint_1");
  const double read_seconds = Since(t);
  if (!read.ok()) {
    std::cerr << read.status() << "\n";
    return 1;
  }
  // The steady-state stall: later snapshots reuse the buffers of the last
  // finished write (no allocation, no page faults).
  AsyncCheckpointer async;
  (void)async.Save(dir + "/checkpoint_2", std::move(snapshot), torch::kFloat);
  if (!async.Wait().ok()) return 1;
  t = std::chrono::steady_clock::now();
  TrainSnapshot again = MakeSnapshot(*model->network(), *optimizer, 3, 1, {"0 0"}, "", "bench", async.TakeBuffers());
  const double reused_stall = Since(t);
  // The peer: the same number of bytes, written and fsynced.
  std::vector<char> block(8 << 20, 'x');
  t = std::chrono::steady_clock::now();
  const int fd = open((dir + "/raw").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (int64_t left = bytes; left > 0; left -= static_cast<int64_t>(block.size())) {
    const ssize_t n = ::write(fd, block.data(), std::min<int64_t>(left, block.size()));
    if (n <= 0) return 1;
  }
  fsync(fd);
  close(fd);
  const double raw = Since(t);
  std::printf(
      "{\"bench\":\"checkpoint\",\"preset\":\"%s\",\"bytes\":%ld,\"snapshot_stall_seconds\":%.3f,"
      "\"reused_snapshot_stall_seconds\":%.3f,\"stall_vs_sync_write\":%.3f,"
      "\"write_seconds\":%.3f,\"read_verify_seconds\":%.3f,\"raw_write_fsync_seconds\":%.3f,"
      "\"write_vs_raw\":%.2f}\n",
      preset.c_str(), static_cast<long>(bytes), stall, reused_stall, reused_stall / write, write, read_seconds, raw,
      write / raw);
  std::filesystem::remove_all(dir);
  return 0;
}
