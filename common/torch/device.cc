#include "common/torch/device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sched.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#ifdef TRAINYARD_LIBTORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/mutex.h"

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

double MeasurePeakFlops(const torch::Device& device, torch::ScalarType dtype) {
  static Mutex mu;
  static auto* cache = new std::map<std::pair<std::string, int>, double>;
  const auto key = std::make_pair(device.str(), static_cast<int>(dtype));
  MutexLock lock(&mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  const int64_t n = device.is_cuda() ? 4096 : 1024;
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const torch::Tensor a = torch::ones({n, n}, options), b = torch::ones({n, n}, options);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms up
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor c = torch::mm(a, b);
    (void)c.sum().item<double>();  // waits for the device
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && seconds > 0) best = std::max(best, 2.0 * n * n * n / seconds);
  }
  (*cache)[key] = best;
  return best;
}

namespace {

std::string ReadSmallFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<PeakFlops> DevicePeakFlops(const torch::Device& device, torch::ScalarType dtype) {
  const PeakDtype peak_dtype = dtype == torch::kBFloat16 ? PeakDtype::kBFloat16 : PeakDtype::kFloat32;
#ifdef TRAINYARD_LIBTORCH_CUDA
  if (device.is_cuda()) {
    const int index = device.has_index() ? device.index() : c10::cuda::current_device();
    cudaDeviceProp properties;
    if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
      return absl::NotFoundError(absl::StrCat("cudaGetDeviceProperties failed for cuda:", index));
    }
    return GpuDatasheetPeak(properties.name, peak_dtype);
  }
#endif
  if (!device.is_cpu()) return absl::NotFoundError(absl::StrCat("no peak is known for device ", device.str()));
  const CpuDescription cpu = ParseCpuInfo(ReadSmallFile("/proc/cpuinfo"));
  absl::StatusOr<double> clock =
      CpuClockHz(ReadSmallFile("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"), cpu);
  if (!clock.ok()) return clock.status();
  int cores = at::get_num_threads();
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) cores = std::min(cores, CPU_COUNT(&allowed));
  return CpuFormulaPeak(cpu, cores, *clock, peak_dtype);
}

}  // namespace trainyard
