// Where a worker's tensors live: parsing --device, checking it against this
// build and machine, and the pieces of LibTorch that differ by device.
#ifndef TRAINYARD_COMMON_TORCH_DEVICE_H_
#define TRAINYARD_COMMON_TORCH_DEVICE_H_

#include <cstdint>

#include <torch/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/peak_flops.h"

namespace trainyard {

// Whether this binary links a CUDA LibTorch (bazel build --config=cuda).
bool BuiltWithCuda();

// "cpu", "cuda" (device 0) or "cuda:N". kInvalidArgument naming `field` for
// anything else, for cuda in a build without CUDA, or for N beyond the
// visible devices; kFailedPrecondition when a CUDA build sees no GPU.
absl::StatusOr<torch::Device> ParseDevice(absl::string_view field, absl::string_view value);

// A random generator on `device` seeded with `seed` (dropout masks are drawn
// on the device that holds the activations).
at::Generator MakeGenerator(const torch::Device& device, uint64_t seed);

// A LibTorch exception as a Status: out of device memory is
// kResourceExhausted, anything else kInternal; `what` names the operation.
absl::Status TorchErrorStatus(absl::string_view what, const c10::Error& e);

// Waits for the device's queued work (CUDA: its current stream); nothing on
// CPU.
void SynchronizeDevice(const torch::Device& device);

// The best FLOP/s of a few 1024^3 (CPU) or 4096^3 (CUDA) matrix products in
// `dtype` on `device`: what the device reaches on a model's main kernel,
// the peak timing/mfu is measured against when none is given. Measured once
// per process, device and dtype (thread-safe).
double MeasurePeakFlops(const torch::Device& device, torch::ScalarType dtype);

// The device's dense peak FLOP/s in `dtype` from what it is
// (common/peak_flops.h): a CUDA GPU's datasheet figure by its name
// (float32 as the non-tensor-core figure: LibTorch leaves TF32 off and
// Trainyard does not turn it on); on the CPU, LibTorch's intra-op threads
// (at most the CPUs this process may run on) x the clock x the vector
// unit's FLOPs per cycle, from /proc/cpuinfo and cpufreq. kNotFound saying
// why when it cannot tell.
absl::StatusOr<PeakFlops> DevicePeakFlops(const torch::Device& device, torch::ScalarType dtype);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_TORCH_DEVICE_H_
