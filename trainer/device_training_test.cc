// Training on a GPU (tagged "gpu"; every case is skipped, with the reason,
// where this build has no CUDA or no GPU is visible):
//   - 20 steps of `tiny` on cuda:0 follow the CPU's float32 losses, in
//     float32 and with bfloat16 compute (float32 master weights);
//   - the fused multi-tensor AdamW update equals the tensor-op one;
//   - an emergency checkpoint taken from GPU state after a preemption holds
//     exactly the GPU's parameters and optimizer state, copied through
//     pinned host memory.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/testing/status_matchers.h"
#include "common/torch/device.h"
#include "gtest/gtest.h"
#include "trainer/testing/tiny_trainer.h"
#include "trainer/train_checkpoint.h"

namespace trainyard {
namespace {

// Why this process cannot train on a GPU; nullptr when it can. (GTEST_SKIP
// only leaves the function it is in, so each test skips itself.)
const char* NoGpuReason() {
  if (!BuiltWithCuda()) return "this build has no CUDA (bazel test --config=cuda on a GPU machine)";
  if (torch::cuda::device_count() == 0) return "no CUDA device is visible";
  return nullptr;
}

class FixedBatches : public BatchIterator {
 public:
  explicit FixedBatches(int steps) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
    for (int s = 0; s < steps; ++s) {
      T5Batch b;
      b.encoder_input_tokens = torch::randint(2, 500, {8, 12}, gen, torch::kLong);
      b.decoder_target_tokens = torch::randint(2, 500, {8, 10}, gen, torch::kLong);
      b.decoder_input_tokens = b.decoder_target_tokens.roll(1, 1);
      b.decoder_input_tokens.select(1, 0).fill_(0);
      b.decoder_loss_weights = torch::ones({8, 10});
      batches_.push_back(b);
    }
  }
  absl::StatusOr<T5Batch> Next() override {
    if (next_ >= batches_.size()) return absl::OutOfRangeError("end");
    return batches_[next_++];
  }

 private:
  std::vector<T5Batch> batches_;
  size_t next_ = 0;
};

std::vector<double> Losses(const torch::Device& device, torch::ScalarType compute, int steps) {
  TinyTrainerOptions options;
  options.init_seed = 4;
  options.learning_rate = 0.01f;
  options.device = device;
  options.compute_dtype = compute;
  std::unique_ptr<TinyTrainer> tiny = MakeTinyTrainer(options);
  EXPECT_EQ(tiny->model->parameters()[0].device(), device);
  FixedBatches batches(steps);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<std::map<std::string, double>> m = tiny->trainer->Train(&batches, 1);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) break;
    losses.push_back(m->at("loss"));
  }
  return losses;
}

TEST(DeviceTrainingTest, TwentyStepsOnTheGpuFollowTheCpu) {
  if (const char* why = NoGpuReason()) GTEST_SKIP() << why;
  constexpr int kSteps = 20;
  const torch::Device gpu(torch::kCUDA, 0);
  const std::vector<double> cpu = Losses(torch::kCPU, torch::kFloat32, kSteps);
  const std::vector<double> fp32 = Losses(gpu, torch::kFloat32, kSteps);
  const std::vector<double> bf16 = Losses(gpu, torch::kBFloat16, kSteps);
  ASSERT_EQ(fp32.size(), cpu.size());
  ASSERT_EQ(bf16.size(), cpu.size());
  double max_fp32 = 0, max_bf16 = 0;
  for (int s = 0; s < kSteps; ++s) {
    max_fp32 = std::max(max_fp32, std::abs(fp32[s] - cpu[s]) / cpu[s]);
    max_bf16 = std::max(max_bf16, std::abs(bf16[s] - cpu[s]) / cpu[s]);
  }
  std::printf(
      "loss step 1 / %d: cpu %.5f / %.5f, gpu fp32 %.5f / %.5f, gpu bf16 %.5f / %.5f; max relative "
      "difference fp32 %.2e, bf16 %.2e\n",
      kSteps, cpu[0], cpu[kSteps - 1], fp32[0], fp32[kSteps - 1], bf16[0], bf16[kSteps - 1], max_fp32, max_bf16);
  EXPECT_LT(cpu[kSteps - 1], cpu[0]);  // it trains
  EXPECT_LT(max_fp32, 1e-3);           // kernels' summation order only
  EXPECT_LT(max_bf16, 3e-2);           // bfloat16's 8-bit mantissa in the products
}

TEST(DeviceTrainingTest, FusedGpuAdamWEqualsTheTensorOpUpdate) {
  if (const char* why = NoGpuReason()) GTEST_SKIP() << why;
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(3);
  const torch::Tensor start = torch::randn({64, 48}).to(gpu);
  NamedTensors fused = {{"w", start.clone()}}, plain = {{"w", start.clone()}};
  OptimizerConfig config;
  config.mutable_adamw()->set_weight_decay(0.01f);
  auto a = CreateOptimizer(config, fused);
  auto b = CreateOptimizer(config, plain);
  ASSERT_TRUE(a.ok() && b.ok());
  (*b)->set_fused_updates(false);
  for (int i = 0; i < 20; ++i) {
    const torch::Tensor g = torch::randn({64, 48}).to(gpu);
    (*a)->Apply({g}, 1e-2);
    (*b)->Apply({g}, 1e-2);
  }
  EXPECT_TRUE(torch::allclose(fused[0].second, plain[0].second, 1e-5, 1e-6));
  EXPECT_GT((fused[0].second - start).abs().max().item<float>(), 0.1f);
  EXPECT_TRUE(torch::allclose((*a)->State().at("w/v"), (*b)->State().at("w/v"), 1e-5, 1e-7));
}

TEST(DeviceTrainingTest, EmergencyCheckpointHoldsTheGpuState) {
  if (const char* why = NoGpuReason()) GTEST_SKIP() << why;
  const torch::Device gpu(torch::kCUDA, 0);
  std::atomic<bool> preempt{false};
  TinyTrainerOptions options;
  options.device = gpu;
  options.trainer.preemption_requested = &preempt;
  std::unique_ptr<TinyTrainer> tiny = MakeTinyTrainer(options);
  FixedBatches batches(10);
  ASSERT_TRUE(tiny->trainer->Train(&batches, 3).ok());
  preempt = true;
  absl::Status stopped = tiny->trainer->Train(&batches, 5).status();
  ASSERT_TRUE(IsPreemptionError(stopped)) << stopped;
  ASSERT_EQ(tiny->trainer->step(), 3);

  TrainSnapshot snapshot = MakeSnapshot(*tiny->model->network(), *tiny->optimizer, 3, 1, {}, "", "emergency", {});
  for (const auto& [name, t] : snapshot.params) {
    EXPECT_TRUE(t.device().is_cpu()) << name;
    EXPECT_TRUE(t.is_pinned()) << name;
  }
  const std::string dir = std::filesystem::path(testing::TempDir()) / "checkpoint_3";
  ASSERT_THAT(WriteTrainCheckpoint(dir, snapshot, torch::kFloat), IsOk());
  absl::StatusOr<TrainCheckpoint> back = ReadTrainCheckpoint(dir);
  ASSERT_THAT(back.status(), IsOk());
  EXPECT_EQ(back->step, 3);
  for (const auto& item : tiny->model->named_parameters()) {
    ASSERT_EQ(back->params.count(item.key()), 1u) << item.key();
    EXPECT_TRUE(torch::equal(back->params.at(item.key()), item.value().detach().cpu())) << item.key();
  }
  for (const auto& [name, t] : tiny->optimizer->State()) {
    if (name == "step") continue;
    ASSERT_EQ(back->optimizer.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(back->optimizer.at(name), t.cpu())) << name;
  }
}

}  // namespace
}  // namespace trainyard
