// A device's dense peak FLOP/s, the denominator of timing/mfu: for GPUs,
// NVIDIA's datasheet figures by the name CUDA reports; for CPUs,
//
//   peak = cores x clock x FLOPs per cycle per core of the vector unit,
//
// the vector unit named by /proc/cpuinfo's flags (two FMA units assumed,
// as Intel's Xeon Gold/Platinum and AMD's Zen 2 and later have; a part
// with one, e.g. some Xeon Silver, reaches half):
//
//   float32   AVX-512 (avx512f)       2 FMA x 16 lanes x 2 = 64
//             AVX-512 on AMD family 25 (Zen 4: 256-bit units)  32
//             AVX2 + FMA (avx2, fma)  2 FMA x  8 lanes x 2 = 32
//             AVX without FMA         1 add + 1 mul x 8    = 16
//             SSE2                    1 add + 1 mul x 4    =  8
//   bfloat16  avx512_bf16 (VDPBF16PS: two products per float32 lane) twice
//             the float32 figure; without it LibTorch computes bfloat16 in
//             float32: the float32 figure; with amx_bf16 the AMX units'
//             peak is not modelled (kNotFound).
//
// Pure functions of names and text, testable anywhere; common/torch/device.h
// reads the device they describe.
#ifndef TRAINYARD_COMMON_PEAK_FLOPS_H_
#define TRAINYARD_COMMON_PEAK_FLOPS_H_

#include <functional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

// The arithmetic a peak is for. kTensorFloat32: float32 matrix products on
// tensor cores (TF32), which LibTorch leaves off by default.
enum class PeakDtype { kFloat32, kTensorFloat32, kBFloat16 };
const char* PeakDtypeName(PeakDtype dtype);  // "float32", "tf32", "bfloat16"

struct PeakFlops {
  double flops = 0;
  std::string source;  // where the figure comes from, for the log
};

// The dense (no structured sparsity) peak of the NVIDIA GPU that CUDA names
// `device_name` (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"), from
// its datasheet; float32 is the non-tensor-core figure. Names are matched
// by whole words, case-insensitively ("GH200", "L40S" and "A10G" are not
// "H200", "L4" and "A10"). kNotFound naming the device when it is not in
// the table or has no figure for `dtype` (V100: no bfloat16, no TF32).
absl::StatusOr<PeakFlops> GpuDatasheetPeak(absl::string_view device_name, PeakDtype dtype);

// What /proc/cpuinfo says of its first processor.
struct CpuDescription {
  std::string vendor;  // vendor_id
  int family = -1;     // cpu family
  std::string model_name;
  std::set<std::string> flags;
  double mhz = 0;  // cpu MHz
};
CpuDescription ParseCpuInfo(absl::string_view proc_cpuinfo);

// FLOPs per cycle per core (the table above), and the unit's name.
struct VectorUnit {
  int flops_per_cycle = 0;
  std::string name;  // e.g. "AVX-512, 2 FMA units"
};
absl::StatusOr<VectorUnit> CpuVectorUnit(const CpuDescription& cpu, PeakDtype dtype);

// The clock for the peak: cpufreq's cpuinfo_max_freq (kHz, the text of
// /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq; "" when absent),
// else /proc/cpuinfo's "cpu MHz" (in a VM, usually the nominal clock).
// kNotFound when neither gives a positive figure.
absl::StatusOr<double> CpuClockHz(absl::string_view max_freq_khz, const CpuDescription& cpu);

// cores x clock_hz x CpuVectorUnit's FLOPs per cycle; kNotFound when the
// unit is unknown, kInvalidArgument for no cores or no clock.
absl::StatusOr<PeakFlops> CpuFormulaPeak(const CpuDescription& cpu, int cores, double clock_hz, PeakDtype dtype);

// The two denominators of a train summary's utilisation and the log line
// that says where they come from:
//   - `explicit_peak` > 0 (trainyard worker --peak-tflops): timing/mfu
//     against it; no probe.
//   - else `known` (datasheet or formula): timing/mfu against it, and
//     timing/mfu_vs_measured_peak against measure() (the matrix-product
//     probe).
//   - else: both against measure(), and the note says why (`known`'s
//     message).
struct MfuPeaks {
  double peak = 0;      // timing/mfu
  double measured = 0;  // timing/mfu_vs_measured_peak; 0: none
  std::string note;
};
MfuPeaks ChooseMfuPeaks(double explicit_peak, const absl::StatusOr<PeakFlops>& known,
                        const std::function<double()>& measure);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_PEAK_FLOPS_H_
