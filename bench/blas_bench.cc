// BLAS choices side by side: for each candidate libblas.so.3 (and each
// OpenBLAS core type), sgemm GFLOP/s on the matrix shapes of a T5 step, and
// the largest deviation from the reference BLAS (netlib) on the same random
// matrices. Each configuration runs in its own child process, because a
// BLAS library reads its settings (OPENBLAS_CORETYPE, thread counts) when it
// is loaded. One thread per process, as each worker uses.
//
//   bazel run --config=opt //bench:blas_bench -- [--seconds 1]
//
// Prints one JSON object per configuration and shape, then a summary line
// with the fastest verified configuration.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);

struct Config {
  std::string name;
  std::string library;
  std::string coretype;  // OPENBLAS_CORETYPE, "" = the library's own detection
};

struct Shape {
  const char* what;
  int m, n, k;
};

// t5_1_1_small at 8 rows x 64 tokens per worker: 512 tokens; d_model 512,
// d_ff 1024 (gated: two input projections), vocab 32128.
const Shape kShapes[] = {
    {"attention projection 512x512x512", 512, 512, 512},
    {"mlp in 512x1024x512", 1024, 512, 512},
    {"mlp out 512x512x1024", 512, 512, 1024},
    {"logits 512x32128x512", 32128, 512, 512},
};

constexpr char kReference[] = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";

Sgemm Load(const std::string& library, std::string* error) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *error = dlerror();
    return nullptr;
  }
  auto fn = reinterpret_cast<Sgemm>(dlsym(handle, "sgemm_"));
  if (fn == nullptr) *error = library + ": no sgemm_";
  return fn;
}

void Multiply(Sgemm sgemm, const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
              std::vector<float>* c) {
  const float one = 1, zero = 0;
  sgemm("N", "N", &s.m, &s.n, &s.k, &one, a.data(), &s.m, b.data(), &s.k, &zero, c->data(), &s.m);
}

// Runs in the child: measures every shape and prints JSON lines.
int Measure(const Config& config, double seconds) {
  std::string error;
  Sgemm sgemm = Load(config.library, &error);
  Sgemm reference = Load(kReference, &error);
  if (sgemm == nullptr || reference == nullptr) {
    std::printf("{\"config\":\"%s\",\"error\":\"%s\"}\n", config.name.c_str(), error.c_str());
    return 1;
  }
  std::mt19937 gen(1234);
  std::normal_distribution<float> normal(0, 1);
  for (const Shape& s : kShapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n);
    std::vector<float> c(static_cast<size_t>(s.m) * s.n), want(c.size());
    for (float& x : a) x = normal(gen);
    for (float& x : b) x = normal(gen);
    Multiply(reference, s, a, b, &want);
    Multiply(sgemm, s, a, b, &c);
    // Relative to the size of a dot product of k unit normals (sqrt(k)).
    double worst = 0;
    for (size_t i = 0; i < c.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(c[i] - want[i])));
    const double relative = worst / std::sqrt(static_cast<double>(s.k));
    int runs = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      Multiply(sgemm, s, a, b, &c);
      ++runs;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < seconds);
    const double gflops = 2.0 * s.m * s.n * s.k * runs / elapsed / 1e9;
    std::printf("{\"config\":\"%s\",\"shape\":\"%s\",\"gflops\":%.2f,\"max_error_vs_reference\":%.3g}\n",
                config.name.c_str(), s.what, gflops, relative);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
  }
  const std::string openblas = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3";
  const std::string blis = "/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3";
  const std::vector<Config> configs = {
      {"reference (netlib)", kReference, ""},
      {"openblas 0.3.21 (own detection)", openblas, ""},
      {"openblas 0.3.21 CORETYPE=Haswell", openblas, "Haswell"},
      {"openblas 0.3.21 CORETYPE=SkylakeX", openblas, "SkylakeX"},
      {"openblas 0.3.21 CORETYPE=Cooperlake", openblas, "Cooperlake"},
      {"blis 0.9", blis, ""},
  };
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("BLIS_NUM_THREADS", "1", 1);
  for (const Config& config : configs) {
    if (access(config.library.c_str(), R_OK) != 0) {
      std::printf("{\"config\":\"%s\",\"error\":\"%s is not installed\"}\n", config.name.c_str(),
                  config.library.c_str());
      continue;
    }
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      if (config.coretype.empty()) {
        unsetenv("OPENBLAS_CORETYPE");
      } else {
        setenv("OPENBLAS_CORETYPE", config.coretype.c_str(), 1);
      }
      _exit(Measure(config, seconds));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("{\"config\":\"%s\",\"error\":\"the measuring process ended with status %d\"}\n", config.name.c_str(),
                  status);
    }
  }
  return 0;
}
