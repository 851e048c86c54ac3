#include "common/torch/device.h"

#include <torch/cuda.h>

#include <iostream>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, ParsesCpu) {
  absl::StatusOr<torch::Device> d = ParseDevice("--device", "cpu");
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_TRUE(d->is_cpu());
}

TEST(DeviceTest, RefusesWhatIsNotADevice) {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "CPU", "", "cuda:1:2"}) {
    EXPECT_THAT(ParseDevice("--device", bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("allowed: cpu, cuda, cuda:N")))
        << bad;
  }
}

TEST(DeviceTest, CudaNeedsACudaBuildAndAVisibleDevice) {
  absl::StatusOr<torch::Device> d = ParseDevice("--device", "cuda:0");
  if (!BuiltWithCuda()) {
    EXPECT_THAT(d, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a CUDA build")));
    return;
  }
  if (torch::cuda::device_count() == 0) {
    EXPECT_THAT(d, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device is visible")));
    return;
  }
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_TRUE(d->is_cuda());
  EXPECT_THAT(ParseDevice("--device", "cuda:255"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CUDA device(s)")));
}

TEST(DeviceTest, CpuGeneratorIsSeededLikeAFreshOne) {
  at::Generator a = MakeGenerator(torch::kCPU, 42), b = MakeGenerator(torch::kCPU, 42);
  torch::Tensor x = torch::rand({8}, a), y = torch::rand({8}, b);
  EXPECT_TRUE(torch::equal(x, y));
  EXPECT_FALSE(torch::equal(torch::rand({8}, MakeGenerator(torch::kCPU, 43)), y));
}

TEST(DeviceTest, OutOfMemoryIsResourceExhausted) {
  const c10::OutOfMemoryError oom(c10::SourceLocation{"f", "file.cc", 1}, "CUDA out of memory");
  EXPECT_THAT(TorchErrorStatus("backward", oom),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("backward: CUDA out of memory")));
  const c10::Error other(c10::SourceLocation{"f", "file.cc", 1}, "shape mismatch");
  EXPECT_THAT(TorchErrorStatus("forward", other),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("forward: shape mismatch")));
}

TEST(MeasurePeakFlopsTest, MeasuredOnceThenTheSame) {
  const double probe = MeasurePeakFlops(torch::Device(torch::kCPU), torch::kFloat32);
  EXPECT_GT(probe, 1e8);  // any CPU does 0.1 GFLOP/s
  EXPECT_EQ(MeasurePeakFlops(torch::Device(torch::kCPU), torch::kFloat32), probe);
}

// The pure parts are common/peak_flops_test; here, that the device's own
// description reaches them: this CPU's formula (or why not), and on a GPU
// machine its datasheet figure (or why not), printed for the record.
TEST(DevicePeakFlopsTest, TheDeviceIsKnownOrSaysWhy) {
  std::vector<torch::Device> devices = {torch::Device(torch::kCPU)};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA, 0);
  for (const torch::Device& device : devices) {
    for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
      absl::StatusOr<PeakFlops> peak = DevicePeakFlops(device, dtype);
      if (peak.ok()) {
        EXPECT_GT(peak->flops, 1e8) << device.str();
        EXPECT_THAT(peak->source, HasSubstr(device.is_cpu() ? "FLOP/cycle" : "datasheet"));
        std::cout << device.str() << " " << c10::toString(dtype) << ": " << peak->flops / 1e12 << " TFLOP/s ("
                  << peak->source << ")\n";
      } else {
        EXPECT_EQ(peak.status().code(), absl::StatusCode::kNotFound) << peak.status();
        std::cout << device.str() << " " << c10::toString(dtype) << ": " << peak.status().message() << "\n";
      }
    }
  }
}

}  // namespace
}  // namespace trainyard
