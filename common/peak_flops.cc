#include "common/peak_flops.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainyard {
namespace {

// One row of NVIDIA's datasheets: dense FLOP/s (0: the part has none).
struct GpuRow {
  const char* model;    // a word of CUDA's name
  const char* variant;  // a further word it must have; nullptr: any other
  const char* label;
  double float32;  // non-tensor
  double tf32;     // tensor cores
  double bfloat16;
};

// Sparsity figures halved where the datasheet gives only those. The first
// row whose words match wins, so variants come before their default.
constexpr GpuRow kGpus[] = {
    {"H200", "NVL", "H200 NVL", 60e12, 417.5e12, 835.5e12},
    {"H200", nullptr, "H200 SXM", 67e12, 494.7e12, 989.5e12},
    {"H100", "NVL", "H100 NVL", 60e12, 417.5e12, 835.5e12},
    {"H100", "PCIE", "H100 PCIe", 51e12, 378e12, 756.5e12},
    {"H100", nullptr, "H100 SXM", 67e12, 494.7e12, 989.5e12},
    {"A100", nullptr, "A100", 19.5e12, 156e12, 312e12},
    {"A10", nullptr, "A10", 31.2e12, 62.5e12, 125e12},
    {"L4", nullptr, "L4", 30.3e12, 60e12, 121e12},
    {"V100S", nullptr, "V100S PCIe", 16.4e12, 0, 0},
    {"V100", "SXM2", "V100 SXM2", 15.7e12, 0, 0},
    {"V100", "PCIE", "V100 PCIe", 14e12, 0, 0},
};

std::string Tflops(double flops) { return absl::StrFormat("%.4g TFLOP/s", flops / 1e12); }

}  // namespace

const char* PeakDtypeName(PeakDtype dtype) {
  switch (dtype) {
    case PeakDtype::kFloat32:
      return "float32";
    case PeakDtype::kTensorFloat32:
      return "tf32";
    case PeakDtype::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

absl::StatusOr<PeakFlops> GpuDatasheetPeak(absl::string_view device_name, PeakDtype dtype) {
  // Words: runs of letters and digits, upper-cased.
  std::string spaced = absl::AsciiStrToUpper(device_name);
  for (char& c : spaced) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = ' ';
  }
  const std::vector<std::string> split = absl::StrSplit(spaced, ' ', absl::SkipEmpty());
  const std::set<std::string> words(split.begin(), split.end());
  for (const GpuRow& row : kGpus) {
    if (!words.count(row.model) || (row.variant != nullptr && !words.count(row.variant))) continue;
    const double flops = dtype == PeakDtype::kFloat32         ? row.float32
                         : dtype == PeakDtype::kTensorFloat32 ? row.tf32
                                                              : row.bfloat16;
    if (flops <= 0) {
      return absl::NotFoundError(absl::StrCat("'", device_name, "' (NVIDIA ", row.label, ") has no ",
                                              PeakDtypeName(dtype), " tensor-core figure in its datasheet"));
    }
    PeakFlops peak;
    peak.flops = flops;
    peak.source = absl::StrCat("NVIDIA ", row.label, " datasheet, ", PeakDtypeName(dtype), " dense");
    return peak;
  }
  return absl::NotFoundError(
      absl::StrCat("'", device_name, "' is not in the table of GPU peaks (H200, H100, A100, A10, L4, V100)"));
}

CpuDescription ParseCpuInfo(absl::string_view proc_cpuinfo) {
  CpuDescription cpu;
  for (absl::string_view line : absl::StrSplit(proc_cpuinfo, '\n')) {
    if (absl::StripAsciiWhitespace(line).empty()) {
      if (!cpu.vendor.empty() || !cpu.flags.empty()) break;  // the first processor's block ends
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (key == "vendor_id") {
      cpu.vendor = std::string(value);
    } else if (key == "cpu family") {
      if (!absl::SimpleAtoi(value, &cpu.family)) cpu.family = -1;
    } else if (key == "model name") {
      cpu.model_name = std::string(value);
    } else if (key == "cpu MHz") {
      if (!absl::SimpleAtod(value, &cpu.mhz)) cpu.mhz = 0;
    } else if (key == "flags") {
      for (absl::string_view f : absl::StrSplit(value, ' ', absl::SkipEmpty())) cpu.flags.insert(std::string(f));
    }
  }
  return cpu;
}

absl::StatusOr<VectorUnit> CpuVectorUnit(const CpuDescription& cpu, PeakDtype dtype) {
  auto has = [&](const char* flag) { return cpu.flags.count(flag) > 0; };
  VectorUnit unit;
  if (has("avx512f") && cpu.vendor == "AuthenticAMD" && cpu.family == 25) {
    unit = {32, "AVX-512 on 256-bit units (AMD family 25), 2 FMA units"};
  } else if (has("avx512f")) {
    unit = {64, "AVX-512, 2 FMA units"};
  } else if (has("avx2") && has("fma")) {
    unit = {32, "AVX2 + FMA, 2 FMA units"};
  } else if (has("avx")) {
    unit = {16, "AVX, an add and a multiply unit"};
  } else if (has("sse2")) {
    unit = {8, "SSE2, an add and a multiply unit"};
  } else {
    return absl::NotFoundError(absl::StrCat("/proc/cpuinfo's flags name no x86 vector unit (",
                                            cpu.model_name.empty() ? "?" : cpu.model_name, ")"));
  }
  if (dtype != PeakDtype::kBFloat16) return unit;
  if (has("amx_bf16")) {
    return absl::NotFoundError(absl::StrCat("the CPU has AMX (amx_bf16), whose bfloat16 peak is not modelled (",
                                            cpu.model_name.empty() ? "?" : cpu.model_name, ")"));
  }
  if (has("avx512_bf16") && has("avx512f")) {
    unit.flops_per_cycle *= 2;
    absl::StrAppend(&unit.name, ", AVX512_BF16");
  } else {
    absl::StrAppend(&unit.name, ", bfloat16 computed in float32");
  }
  return unit;
}

absl::StatusOr<double> CpuClockHz(absl::string_view max_freq_khz, const CpuDescription& cpu) {
  double khz = 0;
  if (absl::SimpleAtod(absl::StripAsciiWhitespace(max_freq_khz), &khz) && khz > 0) return khz * 1e3;
  if (cpu.mhz > 0) return cpu.mhz * 1e6;
  return absl::NotFoundError("no CPU clock: neither cpufreq's cpuinfo_max_freq nor /proc/cpuinfo's cpu MHz");
}

absl::StatusOr<PeakFlops> CpuFormulaPeak(const CpuDescription& cpu, int cores, double clock_hz, PeakDtype dtype) {
  if (cores < 1 || !(clock_hz > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CPU peak needs cores and a clock (", cores, " cores, ", clock_hz, " Hz)"));
  }
  absl::StatusOr<VectorUnit> unit = CpuVectorUnit(cpu, dtype);
  if (!unit.ok()) return unit.status();
  PeakFlops peak;
  peak.flops = static_cast<double>(cores) * clock_hz * unit->flops_per_cycle;
  peak.source = absl::StrFormat("%d core(s) x %.4g GHz x %d FLOP/cycle (%s), %s", cores, clock_hz / 1e9,
                                unit->flops_per_cycle, unit->name, PeakDtypeName(dtype));
  return peak;
}

MfuPeaks ChooseMfuPeaks(double explicit_peak, const absl::StatusOr<PeakFlops>& known,
                        const std::function<double()>& measure) {
  MfuPeaks out;
  if (explicit_peak > 0) {
    out.peak = explicit_peak;
    out.note = absl::StrCat("timing/mfu against ", Tflops(explicit_peak), " per device, as given (--peak-tflops)");
    return out;
  }
  out.measured = measure();
  if (known.ok()) {
    out.peak = known->flops;
    out.note = absl::StrCat("timing/mfu against ", Tflops(known->flops), " per device (", known->source,
                            "); timing/mfu_vs_measured_peak against ", Tflops(out.measured),
                            ", measured by a matrix-product probe");
    return out;
  }
  out.peak = out.measured;
  out.note = absl::StrCat("timing/mfu against ", Tflops(out.measured),
                          " per device, measured by a matrix-product probe: no datasheet or formula peak, ",
                          known.status().message());
  return out;
}

}  // namespace trainyard
