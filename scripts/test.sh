#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. every Bazel test (//...), default toolchain;
#   2. the same tests under AddressSanitizer + LeakSanitizer (--config=asan);
#   3. the concurrency tests under ThreadSanitizer (--config=tsan): the
#      coordinator, the rendezvous store, the HTTP server, metrics and rate
#      limiter (code without LibTorch, whose uninstrumented thread pools
#      TSan cannot follow);
#   4. the libFuzzer targets under ASan, TRAINYARD_FUZZ_SECONDS each (60);
#   5. the GPU configuration compiled and linked (--config=cuda against the
#      CUDA LibTorch of scripts/setup-libtorch-cuda.sh): the worker binary,
#      the GPU tests and the GPU benchmark (nothing CUDA runs on a machine
#      without a GPU; bench/gpu/run.sh runs them on one).
# Ends with one line "N passed, N failed" counting every test case.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

checks=()
logs=()
run_step() {  # NAME COMMAND... : runs, records pass/fail
  local name="$1"; shift
  echo "==> $name"
  if "$@"; then checks+=("--check" "$name=pass"); else checks+=("--check" "$name=fail"); fi
}

# Bazel exits 3 when tests fail and 1 when the build fails; the failed test
# cases are counted from the test logs, a failed build counts on its own.
bazel_tests() {  # LABEL CONFIG-FLAGS... [-- TARGETS...]  (default //...)
  local label="$1"; shift
  local flags=() targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=(//...)
  set -- "${flags[@]}"
  bazel test "$@" --keep_going "${targets[@]}"
  local rc=$?
  logs+=("--testlogs" "$label=$(bazel info "$@" bazel-testlogs 2>/dev/null)")
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || checks+=("--check" "bazel test $label builds=fail")
}

echo "==> bazel test //..."
bazel_tests default
echo "==> bazel test --config=asan //..."
bazel_tests asan --config=asan
echo "==> bazel test --config=tsan (concurrency tests)"
bazel_tests tsan --config=tsan -- //coordinator:all //collective:store_test //common:http_server_test \
  //common:metrics_test //common:rate_limiter_test
run_step "fuzz" scripts/fuzz.sh "${TRAINYARD_FUZZ_SECONDS:-60}"
if [ -f /usr/local/cuda/include/nccl.h ]; then
  run_step "cuda libtorch" scripts/setup-libtorch-cuda.sh
  run_step "cuda build" bazel build --config=cuda //third_party:cuda_link_check //client:trainyard-torch \
    //bench:gpu_bench //collective:nccl_collective_test //trainer:device_training_test //common:device_test
else
  echo "==> cuda build skipped: no CUDA toolkit with NCCL under /usr/local/cuda"
fi

python3 scripts/test_summary.py "${logs[@]}" "${checks[@]}"
