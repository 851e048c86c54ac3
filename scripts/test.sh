#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. every Bazel test (//...), default toolchain;
#   2. the same tests under AddressSanitizer + LeakSanitizer (--config=asan);
#   3. the libFuzzer targets under ASan, TRAINYARD_FUZZ_SECONDS each (60);
#   4. the GPU configuration compiled and linked (--config=cuda; nothing CUDA
#      runs on a machine without a GPU).
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
bazel_tests() {  # LABEL CONFIG-FLAGS...
  local label="$1"; shift
  bazel test "$@" --keep_going //...
  local rc=$?
  logs+=("--testlogs" "$label=$(bazel info "$@" bazel-testlogs 2>/dev/null)")
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || checks+=("--check" "bazel test $label builds=fail")
}

echo "==> bazel test //..."
bazel_tests default
echo "==> bazel test --config=asan //..."
bazel_tests asan --config=asan
run_step "fuzz" scripts/fuzz.sh "${TRAINYARD_FUZZ_SECONDS:-60}"
if [ -f /usr/local/cuda/include/nccl.h ]; then
  run_step "cuda build" bazel build --config=cuda //third_party:cuda_link_check //collective:nccl_collective //collective:nccl_collective_test
else
  echo "==> cuda build skipped: no CUDA toolkit with NCCL under /usr/local/cuda"
fi

python3 scripts/test_summary.py "${logs[@]}" "${checks[@]}"
