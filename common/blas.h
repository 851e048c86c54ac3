// The BLAS under LibTorch. Debian's LibTorch calls whatever libblas.so.3
// resolves to; scripts/setup.sh installs OpenBLAS for it. OpenBLAS 0.3.21
// does not recognise CPUs newer than it (Sapphire Rapids among them) and
// falls back to kernels without AVX-512, about 5x slower here
// (bench/blas_bench, docs/performance.md). OpenBLAS reads its core type when
// it is loaded, before main(), so the fix is an environment variable set
// before the process starts.
#ifndef TRAINYARD_COMMON_BLAS_H_
#define TRAINYARD_COMMON_BLAS_H_

#include <string>

namespace trainyard {

// The OPENBLAS_CORETYPE this CPU should use: "SkylakeX" where it has the
// AVX-512 F/BW/DQ/VL/CD that OpenBLAS's SkylakeX kernels use, "" otherwise
// (OpenBLAS's own detection is then right or harmless).
std::string OpenBlasCoreTypeForThisCpu();

// Call first in main(). When OpenBLAS is loaded, OPENBLAS_CORETYPE is
// unset and this CPU wants one, sets it and re-executes the program (same
// arguments) once; otherwise returns. An explicit OPENBLAS_CORETYPE is
// always respected.
void ReexecWithTunedBlas(char** argv);

// Sets the BLAS's thread count where the library allows it at run time
// (OpenBLAS, BLIS); ATen's own pool is set by the caller.
void SetBlasThreads(int threads);

// What runs the matrix products, for logs and benchmark output, e.g.
// "OpenBLAS 0.3.21 DYNAMIC_ARCH ... (core SkylakeX)" or "libblas.so.3
// (reference or unknown)".
std::string BlasDescription();

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_BLAS_H_
