#!/usr/bin/env bash
# Prepares, on the CPU machine, what bench/gpu/run.sh needs on a GPU machine
# that has PyTorch but no Bazel, gRPC or network: the GPU tests and the
# benchmark built with --config=cuda -c opt against the CUDA LibTorch that
# GPU machines' PyTorch has (scripts/setup-libtorch-cuda.sh), stripped, with
# the Debian libraries they link (gRPC, protobuf, Abseil, ...; not LibTorch,
# CUDA or the C library, which the GPU machine has), and the preset's
# shape for the Hugging Face peer. Everything goes into .gpu/ (ignored by
# git), small enough to travel with the working tree.
#
# usage: bench/gpu/stage.sh [PRESET [MODE]]   (default t5_1_1_base opt; MODE
#        fastbuild only to check the staging itself, never for figures)
set -euo pipefail
cd "$(dirname "$0")/../.."
preset="${1:-t5_1_1_base}"
mode="${2:-opt}"
scripts/setup.sh >/dev/null
scripts/setup-libtorch-cuda.sh >/dev/null
targets=(//bench:gpu_bench //trainer:device_training_test //collective:nccl_collective_test //common/torch:device_test)
bazel build --config=cuda -c "$mode" "${targets[@]}" >/dev/null 2>&1 || { bazel build --config=cuda -c "$mode" "${targets[@]}"; exit 1; }
bazel build -c opt //client:trainyard >/dev/null 2>&1 || { bazel build -c opt //client:trainyard; exit 1; }
bin="$(bazel info --config=cuda -c "$mode" bazel-bin 2>/dev/null)"
cpu_bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib
for t in bench/gpu_bench trainer/device_training_test collective/nccl_collective_test common/torch/device_test; do
  strip -o ".gpu/bin/$(basename "$t")" "$bin/$t"
done
# The libraries the binaries load that a GPU machine's PyTorch does not
# bring: everything resolved from the system's library directories except
# the C and C++ runtimes.
libtorch="$(sed -n 's/.*TRAINYARD_LIBTORCH_CUDA=//p' .bazelrc.cuda)/lib"
for b in .gpu/bin/*; do
  LD_LIBRARY_PATH="$libtorch:/usr/local/cuda/lib64" ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$lib" in
    /usr/local/cuda/* | "$libtorch"/*) continue ;;
  esac
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libutil.so* | ld-linux* | libgcc_s.so* | libstdc++.so*) continue ;;
  esac
  cp -L "$lib" .gpu/lib/
done
# Whatever is still unresolved must be what the GPU machine's PyTorch brings.
missing=$(for b in .gpu/bin/*; do
  LD_LIBRARY_PATH="$PWD/.gpu/lib:$libtorch:/usr/local/cuda/lib64" ldd "$b" | awk '/not found/ {print $1}'
done | sort -u | grep -Ev '^lib(cu|nv|nccl|torch|c10|gomp)' || true)
if [ -n "$missing" ]; then
  echo "stage: not staged and not from PyTorch/CUDA: $missing" >&2
  exit 1
fi
"$cpu_bin/client/trainyard" model-info --preset "$preset" --json >.gpu/preset.json
cp bench/gpu/hf_peer.py bench/gpu/flops.py .gpu/
du -sh .gpu
echo "staged .gpu for $preset; on the GPU machine: bench/gpu/run.sh (carry .gpu)"
