#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. the Bazel tests tagged no_asan (they measure memory, or load a shim
#      the sanitizers' runtimes refuse), default toolchain;
#   2. every other Bazel test (//...) under AddressSanitizer +
#      LeakSanitizer (--config=asan), which builds every target: each test
#      runs once, and nothing is compiled twice for it;
#   3. the concurrency tests under ThreadSanitizer (--config=tsan): the
#      coordinator, the rendezvous store, the HTTP server, metrics and rate
#      limiter (code without LibTorch, whose uninstrumented thread pools
#      TSan cannot follow);
#   4. the layering of BUILD.bazel (tools/check_layering.sh: no forbidden
#      dependency, transitive or on third-party libraries);
#   5. the counting check: this script run on the fixtures of
#      //tests/counting (a target that fails after writing an all-pass XML,
#      a skip, a target that does not build, a shell test that dies, a data
#      race under TSan, a leak under LSan) must print the closing line each
#      deserves and exit non-zero;
#   6. the annotated lock discipline, built with clang -Werror=thread-safety
#      (scripts/thread_safety.sh);
#   7. the libFuzzer targets under ASan, TRAINYARD_FUZZ_SECONDS each (30;
#      longer campaigns: scripts/fuzz.sh SECONDS);
#   8. the image (deploy/image_test.sh): deploy/Dockerfile built with
#      podman, a coordinator and two workers run as containers, jobs from
#      the CLI outside, a worker container stopped (preemption);
#   9. the GPU configuration compiled and linked (--config=cuda against the
#      CUDA LibTorch of scripts/setup-libtorch-cuda.sh): the worker binary,
#      the GPU tests and the GPU benchmark (nothing CUDA runs on a machine
#      without a GPU; bench/gpu/run.sh runs them on one).
#
#   scripts/test.sh [--config=NAME] PATTERN...
# runs only those Bazel targets (e.g. //tests/system:all), counted the same
# way, with the same exit status.
#
# Ends with one line "N passed, N failed, N skipped" (scripts/test_summary.py):
# Bazel's own verdict for each test target of this run decides, test cases
# are counted from those targets' XML, and skips are listed with their
# reasons. Exits 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
suite_start=$SECONDS
scripts/setup.sh || exit 1
setup_seconds=$((SECONDS - suite_start))

bep_dir="$(mktemp -d)"
trap 'rm -rf "$bep_dir"' EXIT
summary_args=("--step" "setup (scripts/setup.sh)=$setup_seconds")

timed() {  # NAME COMMAND... : runs COMMAND, records its wall time as step NAME
  local name="$1"; shift
  local start=$SECONDS rc=0
  "$@" || rc=$?
  summary_args+=("--step" "$name=$((SECONDS - start))")
  return "$rc"
}

run_step() {  # NAME COMMAND... : one case, passed if COMMAND exits 0
  local name="$1"; shift
  echo "==> $name"
  if timed "$name" "$@"; then summary_args+=("--check" "$name=pass"); else summary_args+=("--check" "$name=fail"); fi
}

bazel_tests() {  # LABEL CONFIG-FLAGS... [-- TARGETS...]  (default //...)
  local label="$1"; shift
  local flags=() targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=(//...)
  local bep="$bep_dir/$label.json"
  echo "==> bazel test ${flags[*]} ${targets[*]}"
  # The exit code is not needed: the build events record it, and every
  # verdict (test_summary.py).
  timed "bazel test $label" bazel test "${flags[@]}" --keep_going --build_event_json_file="$bep" "${targets[@]}"
  summary_args+=("--bep" "$label=$bep")
}

# --- A subset: scripts/test.sh [--config=NAME] PATTERN... ---
if [ $# -gt 0 ]; then
  flags=()
  while [ $# -gt 0 ] && [[ "$1" == --* ]]; do flags+=("$1"); shift; done
  if [ $# -eq 0 ]; then
    echo "usage: scripts/test.sh [--config=NAME] PATTERN...   (no arguments: the whole suite)" >&2
    exit 2
  fi
  bazel_tests subset "${flags[@]}" -- "$@"
  python3 scripts/test_summary.py --step "total=$((SECONDS - suite_start))" "${summary_args[@]}"
  exit $?
fi

# --- The whole suite ---
# The tests ASan leaves out (.bazelrc: test:asan --test_tag_filters=-no_asan)
# run in the default build; if the query fails, every test does.
mapfile -t plain_tests < <(bazel query 'attr(tags, "\bno_asan\b", tests(//...))' 2>/dev/null)
bazel_tests default -- "${plain_tests[@]}"
bazel_tests asan --config=asan
bazel_tests tsan --config=tsan -- //coordinator:all //collective:store_test //common:http_server_test \
  //common:metrics_test //common:rate_limiter_test

# The layering (BUILD.bazel): one case per rule of tools/check_layering.sh.
echo "==> layering (tools/check_layering.sh)"
layering_start=$SECONDS
layering="$(tools/check_layering.sh)"
layering_rc=$?
summary_args+=("--step" "layering=$((SECONDS - layering_start))")
printf '%s\n' "$layering"
while IFS= read -r line; do
  case "$line" in
    "ok: "*) summary_args+=("--check" "layering: ${line#ok: }=pass") ;;
    "FAIL: "*) rule="${line#FAIL: }"; summary_args+=("--check" "layering: ${rule%%;*}=fail") ;;
  esac
done <<<"$layering"
if [ "$layering_rc" -ne 0 ] && ! grep -q '^FAIL: ' <<<"$layering"; then
  summary_args+=("--check" "layering: tools/check_layering.sh exited $layering_rc=fail")
fi

# The counting itself: each fixture run must end with the line it deserves
# and the exit status that goes with it.
expect_count() {  # WANT-LINE PATTERN-AND-FLAGS...
  local want="$1"; shift
  local out rc
  out="$(scripts/test.sh "$@" 2>&1)"
  rc=$?
  local last="${out##*$'\n'}"
  local want_failed="${want#*passed, }"
  want_failed="${want_failed%% failed*}"
  if [ "$last" != "$want" ]; then
    echo "counting: scripts/test.sh $*: closing line '$last', want '$want'; its output:"
    printf '%s\n' "$out" | tail -n 40
    return 1
  fi
  if { [ "$want_failed" -eq 0 ] && [ "$rc" -ne 0 ]; } || { [ "$want_failed" -ne 0 ] && [ "$rc" -eq 0 ]; }; then
    echo "counting: scripts/test.sh $*: exit status $rc with '$last'"
    return 1
  fi
  echo "counting: scripts/test.sh $*: '$last', exit $rc, as it should"
}
run_step "counting: a target that fails after an all-pass XML" \
  expect_count "0 passed, 1 failed, 0 skipped" //tests/counting:fails_after_passing_xml_test
run_step "counting: skips, a target that does not build, a shell test that dies" \
  expect_count "1 passed, 2 failed, 2 skipped" //tests/counting:passes_and_skips_test \
  //tests/counting:does_not_build_test //tests/counting:script_dies_test
run_step "counting: a data race under ThreadSanitizer" \
  expect_count "0 passed, 1 failed, 0 skipped" --config=tsan //tests/counting:data_race_test
run_step "counting: a leak under LeakSanitizer" \
  expect_count "0 passed, 1 failed, 0 skipped" --config=asan //tests/counting:leak_test

run_step "thread safety (clang -Werror=thread-safety)" scripts/thread_safety.sh
run_step "fuzz" scripts/fuzz.sh "${TRAINYARD_FUZZ_SECONDS:-30}"

# The image built and run with podman: one case per check of
# deploy/image_test.sh (it needs the CLI of the default build).
echo "==> image (deploy/image_test.sh)"
image_start=$SECONDS
if bazel build //client:trainyard; then
  image_out="$(deploy/image_test.sh 2>&1)"
  image_rc=$?
else
  image_out="FAIL: the CLI (bazel build //client:trainyard) (exit 1)"
  image_rc=1
fi
summary_args+=("--step" "image (deploy/image_test.sh)=$((SECONDS - image_start))")
printf '%s\n' "$image_out"
image_cases=0
while IFS= read -r line; do
  case "$line" in
    "PASS: "*) summary_args+=("--check" "image: ${line#PASS: }=pass"); image_cases=$((image_cases + 1)) ;;
    "FAIL: "*" (exit "*")") name="${line#FAIL: }"; summary_args+=("--check" "image: ${name% (exit *}=fail")
      image_cases=$((image_cases + 1)) ;;
    "FAIL: "*) name="${line#FAIL: }"; summary_args+=("--check" "image: ${name%%: *}=fail")
      image_cases=$((image_cases + 1)) ;;
  esac
done <<<"$image_out"
if [ "$image_rc" -ne 0 ] && ! grep -q '^FAIL: ' <<<"$image_out"; then
  summary_args+=("--check" "image: deploy/image_test.sh exited $image_rc=fail")
elif [ "$image_cases" -eq 0 ]; then
  summary_args+=("--check" "image: deploy/image_test.sh reported no check=fail")
fi
if [ -f /usr/local/cuda/include/nccl.h ]; then
  run_step "cuda libtorch" scripts/setup-libtorch-cuda.sh
  run_step "cuda build" bazel build --config=cuda //third_party:cuda_link_check //client:trainyard-torch \
    //bench:gpu_bench //collective:nccl_collective_test //trainer:device_training_test //common:device_test
else
  echo "==> cuda build skipped: no CUDA toolkit with NCCL under /usr/local/cuda"
  summary_args+=("--skip" "cuda build=no CUDA toolkit with NCCL under /usr/local/cuda")
fi

python3 scripts/test_summary.py --step "total=$((SECONDS - suite_start))" "${summary_args[@]}"
