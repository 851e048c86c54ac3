// Prints the CUDA runtime and NCCL versions this build links against. Built (not
// run) in CI so that the GPU toolchain cannot rot on machines without a GPU.
#include <cstdio>

#include <cuda_runtime_api.h>
#include <nccl.h>

int main() {
  int cuda_runtime = 0;
  int nccl = 0;
  if (cudaRuntimeGetVersion(&cuda_runtime) != cudaSuccess) return 1;
  if (ncclGetVersion(&nccl) != ncclSuccess) return 1;
  std::printf("{\"cuda_runtime\": %d, \"nccl\": %d}\n", cuda_runtime, nccl);
  return 0;
}
