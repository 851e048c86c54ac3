#include "common/blas.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace trainyard {
namespace {

bool OpenBlasLoaded() { return dlsym(RTLD_DEFAULT, "openblas_get_config") != nullptr; }

}  // namespace

std::string OpenBlasCoreTypeForThisCpu() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512cd");
  return avx512 ? "SkylakeX" : "";
}

void ReexecWithTunedBlas(char** argv) {
  // Once set (here, by the user, or by a parent), never again: no loop.
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !OpenBlasLoaded()) return;
  const std::string core = OpenBlasCoreTypeForThisCpu();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Could not re-execute: carry on with OpenBLAS's own choice.
  std::fprintf(stderr, "warning: could not re-execute with OPENBLAS_CORETYPE=%s; matrix products run slower\n",
               core.c_str());
}

void SetBlasThreads(int threads) {
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
  if (auto set = reinterpret_cast<void (*)(long)>(dlsym(RTLD_DEFAULT, "bli_thread_set_num_threads"))) set(threads);
}

std::string BlasDescription() {
  auto config = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  auto core = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (config != nullptr) {
    std::string out = config();
    if (core != nullptr) out += std::string(" (core ") + core() + ")";
    return out;
  }
  if (dlsym(RTLD_DEFAULT, "bli_info_get_version_str") != nullptr) return "BLIS";
  return "libblas.so.3 (reference or unknown)";
}

}  // namespace trainyard
