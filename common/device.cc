#include "common/device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <string>

#ifdef TRAINYARD_LIBTORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace trainyard {

bool BuiltWithCuda() {
#ifdef TRAINYARD_LIBTORCH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<torch::Device> ParseDevice(absl::string_view field, absl::string_view value) {
  if (value == "cpu") return torch::Device(torch::kCPU);
  int index = 0;
  absl::string_view rest = value;
  const bool cuda = absl::ConsumePrefix(&rest, "cuda");
  if (!cuda || (!rest.empty() &&
                (!absl::ConsumePrefix(&rest, ":") || !absl::SimpleAtoi(rest, &index) || index < 0 || index > 255))) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", value, "' is not a device; allowed: cpu, cuda, cuda:N"));
  }
  if (!BuiltWithCuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": '", value,
        "' needs a CUDA build of Trainyard (bazel build --config=cuda, docs/building.md); allowed here: cpu"));
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": '", value, "': no CUDA device is visible (driver, CUDA_VISIBLE_DEVICES)"));
  }
  if (index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", value, "': this machine has ", count, " CUDA device(s), cuda:0..cuda:", count - 1));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

at::Generator MakeGenerator(const torch::Device& device, uint64_t seed) {
  if (device.is_cpu()) return at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator g = at::globalContext().defaultGenerator(device).clone();
  g.set_current_seed(seed);
  return g;
}

absl::Status TorchErrorStatus(absl::string_view what, const c10::Error& e) {
  const std::string message = absl::StrCat(what, ": ", e.what_without_backtrace());
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

void SynchronizeDevice(const torch::Device& device) {
#ifdef TRAINYARD_LIBTORCH_CUDA
  if (device.is_cuda()) c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
#else
  (void)device;
#endif
}

}  // namespace trainyard
