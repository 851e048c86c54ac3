#include "common/peak_flops.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

double Gpu(const char* name, PeakDtype dtype) {
  absl::StatusOr<PeakFlops> peak = GpuDatasheetPeak(name, dtype);
  EXPECT_THAT(peak.status(), IsOk()) << name;
  return peak.ok() ? peak->flops : -1;
}

TEST(GpuDatasheetPeakTest, CudaNamesGiveTheirDatasheetsDenseFigures) {
  // The names cudaGetDeviceProperties reports.
  EXPECT_EQ(Gpu("NVIDIA H100 80GB HBM3", PeakDtype::kBFloat16), 989.5e12);
  EXPECT_EQ(Gpu("NVIDIA H100 80GB HBM3", PeakDtype::kTensorFloat32), 494.7e12);
  EXPECT_EQ(Gpu("NVIDIA H100 80GB HBM3", PeakDtype::kFloat32), 67e12);
  EXPECT_EQ(Gpu("NVIDIA H100 PCIe", PeakDtype::kBFloat16), 756.5e12);
  EXPECT_EQ(Gpu("NVIDIA H100 PCIe", PeakDtype::kFloat32), 51e12);
  EXPECT_EQ(Gpu("NVIDIA H100 NVL", PeakDtype::kBFloat16), 835.5e12);
  EXPECT_EQ(Gpu("NVIDIA H200", PeakDtype::kBFloat16), 989.5e12);
  EXPECT_EQ(Gpu("NVIDIA H200", PeakDtype::kFloat32), 67e12);
  EXPECT_EQ(Gpu("NVIDIA H200 NVL", PeakDtype::kTensorFloat32), 417.5e12);
  EXPECT_EQ(Gpu("NVIDIA A100-SXM4-80GB", PeakDtype::kBFloat16), 312e12);
  EXPECT_EQ(Gpu("NVIDIA A100-PCIE-40GB", PeakDtype::kTensorFloat32), 156e12);
  EXPECT_EQ(Gpu("NVIDIA A100 80GB PCIe", PeakDtype::kFloat32), 19.5e12);
  EXPECT_EQ(Gpu("NVIDIA A10", PeakDtype::kBFloat16), 125e12);
  EXPECT_EQ(Gpu("NVIDIA L4", PeakDtype::kBFloat16), 121e12);
  EXPECT_EQ(Gpu("NVIDIA L4", PeakDtype::kFloat32), 30.3e12);
  EXPECT_EQ(Gpu("Tesla V100-SXM2-16GB", PeakDtype::kFloat32), 15.7e12);
  EXPECT_EQ(Gpu("Tesla V100-PCIE-32GB", PeakDtype::kFloat32), 14e12);
  EXPECT_EQ(Gpu("Tesla V100S-PCIE-32GB", PeakDtype::kFloat32), 16.4e12);
  absl::StatusOr<PeakFlops> h100 = GpuDatasheetPeak("nvidia h100 80gb hbm3", PeakDtype::kBFloat16);
  ASSERT_THAT(h100.status(), IsOk());
  EXPECT_EQ(h100->source, "NVIDIA H100 SXM datasheet, bfloat16 dense");
}

TEST(GpuDatasheetPeakTest, OtherPartsAndMissingDtypesAreNotFoundByName) {
  // Whole words only: none of these is a part of the table.
  for (const char* name : {"NVIDIA A10G", "NVIDIA L40S", "NVIDIA GH200 480GB", "NVIDIA H800", "Tesla V100-SXM3-32GB",
                           "NVIDIA GeForce RTX 4090", ""}) {
    EXPECT_THAT(GpuDatasheetPeak(name, PeakDtype::kBFloat16).status(),
                StatusIs(absl::StatusCode::kNotFound, HasSubstr("is not in the table of GPU peaks")))
        << name;
  }
  EXPECT_THAT(GpuDatasheetPeak("Tesla V100-SXM2-16GB", PeakDtype::kBFloat16).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("'Tesla V100-SXM2-16GB' (NVIDIA V100 SXM2) has no bfloat16 tensor-core figure")));
}

constexpr char kCpuInfo[] =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "cpu family\t: 6\n"
    "model name\t: Intel(R) Xeon(R) Processor\n"
    "cpu MHz\t\t: 2100.000\n"
    "flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512_bf16 amx_bf16\n"
    "\n"
    "processor\t: 1\n"
    "vendor_id\t: AuthenticAMD\n"
    "flags\t\t: fpu\n";

CpuDescription Cpu(const std::string& vendor, int family, const std::string& flags) {
  return ParseCpuInfo("vendor_id\t: " + vendor + "\ncpu family\t: " + std::to_string(family) + "\nflags\t\t: " + flags +
                      "\n");
}

TEST(CpuPeakTest, ParsesTheFirstProcessor) {
  const CpuDescription cpu = ParseCpuInfo(kCpuInfo);
  EXPECT_EQ(cpu.vendor, "GenuineIntel");
  EXPECT_EQ(cpu.family, 6);
  EXPECT_EQ(cpu.model_name, "Intel(R) Xeon(R) Processor");
  EXPECT_EQ(cpu.mhz, 2100.0);
  EXPECT_EQ(cpu.flags.size(), 9u);
  EXPECT_TRUE(cpu.flags.count("avx512f"));
}

TEST(CpuPeakTest, CoresTimesClockTimesTheVectorUnitsFlopsPerCycle) {
  auto peak = [](const CpuDescription& cpu, int cores, double hz, PeakDtype dtype) {
    absl::StatusOr<PeakFlops> p = CpuFormulaPeak(cpu, cores, hz, dtype);
    EXPECT_THAT(p.status(), IsOk());
    return p.ok() ? p->flops : -1;
  };
  const CpuDescription avx512 = Cpu("GenuineIntel", 6, "sse2 avx fma avx2 avx512f");
  const CpuDescription avx2 = Cpu("GenuineIntel", 6, "sse2 avx fma avx2");
  EXPECT_EQ(peak(avx512, 2, 2.1e9, PeakDtype::kFloat32), 2 * 2.1e9 * 64);
  EXPECT_EQ(peak(avx2, 8, 3e9, PeakDtype::kFloat32), 8 * 3e9 * 32);
  EXPECT_EQ(peak(Cpu("AuthenticAMD", 25, "sse2 avx fma avx2 avx512f"), 4, 2.5e9, PeakDtype::kFloat32),
            4 * 2.5e9 * 32);  // Zen 4
  EXPECT_EQ(peak(Cpu("GenuineIntel", 6, "sse2 avx"), 1, 3e9, PeakDtype::kFloat32), 3e9 * 16);
  EXPECT_EQ(peak(Cpu("GenuineIntel", 6, "sse sse2"), 1, 3e9, PeakDtype::kFloat32), 3e9 * 8);
  // bfloat16: twice with AVX512_BF16, else computed in float32.
  EXPECT_EQ(peak(Cpu("GenuineIntel", 6, "avx2 fma avx512f avx512_bf16"), 2, 2e9, PeakDtype::kBFloat16), 2 * 2e9 * 128);
  EXPECT_EQ(peak(avx2, 2, 2e9, PeakDtype::kBFloat16), 2 * 2e9 * 32);
  absl::StatusOr<PeakFlops> p = CpuFormulaPeak(avx512, 2, 2.1e9, PeakDtype::kFloat32);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(p->source, "2 core(s) x 2.1 GHz x 64 FLOP/cycle (AVX-512, 2 FMA units), float32");
}

TEST(CpuPeakTest, UnknownUnitsAndMissingFiguresAreRefusedSayingWhy) {
  EXPECT_THAT(CpuFormulaPeak(Cpu("ARM", 8, "fp asimd"), 4, 2e9, PeakDtype::kFloat32).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("flags name no x86 vector unit")));
  EXPECT_THAT(CpuFormulaPeak(ParseCpuInfo(kCpuInfo), 2, 2.1e9, PeakDtype::kBFloat16).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("AMX (amx_bf16)")));
  EXPECT_THAT(CpuFormulaPeak(ParseCpuInfo(kCpuInfo), 0, 2.1e9, PeakDtype::kFloat32).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 cores")));
}

TEST(CpuPeakTest, TheClockIsCpufreqsMaximumElseCpuMhz) {
  const CpuDescription cpu = ParseCpuInfo(kCpuInfo);
  EXPECT_EQ(*CpuClockHz("3500000\n", cpu), 3.5e9);
  EXPECT_EQ(*CpuClockHz("", cpu), 2.1e9);
  EXPECT_THAT(CpuClockHz("", CpuDescription()).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no CPU clock")));
}

TEST(ChooseMfuPeaksTest, GivenThenKnownThenTheProbeNamingWhy) {
  int probes = 0;
  auto probe = [&] {
    ++probes;
    return 1e11;
  };
  MfuPeaks given = ChooseMfuPeaks(2e12, GpuDatasheetPeak("NVIDIA H200", PeakDtype::kBFloat16), probe);
  EXPECT_EQ(given.peak, 2e12);
  EXPECT_EQ(given.measured, 0);
  EXPECT_EQ(probes, 0);  // no probe
  MfuPeaks known = ChooseMfuPeaks(0, GpuDatasheetPeak("NVIDIA H200", PeakDtype::kBFloat16), probe);
  EXPECT_EQ(known.peak, 989.5e12);
  EXPECT_EQ(known.measured, 1e11);
  EXPECT_EQ(known.note,
            "timing/mfu against 989.5 TFLOP/s per device (NVIDIA H200 SXM datasheet, bfloat16 dense); "
            "timing/mfu_vs_measured_peak against 0.1 TFLOP/s, measured by a matrix-product probe");
  MfuPeaks unknown = ChooseMfuPeaks(0, GpuDatasheetPeak("NVIDIA A10G", PeakDtype::kBFloat16), probe);
  EXPECT_EQ(unknown.peak, 1e11);
  EXPECT_EQ(unknown.measured, 1e11);
  EXPECT_THAT(unknown.note, AllOf(HasSubstr("timing/mfu against 0.1 TFLOP/s per device, measured by a matrix-product "
                                            "probe: no datasheet or formula peak, "),
                                  HasSubstr("'NVIDIA A10G' is not in the table of GPU peaks")));
  EXPECT_EQ(probes, 2);
}

}  // namespace
}  // namespace trainyard
