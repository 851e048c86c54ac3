#!/usr/bin/env bash
# The whole test suite, as CI runs it (docs/building.md, "Tests", says which
# targets each configuration builds and why):
#   1. the default configuration (fastbuild): the Bazel tests tagged no_asan
#      (they measure memory, time processes against each other, or load a
#      shim the sanitizers' runtimes refuse), and every other target that no
#      test under ASan depends on (binaries, benchmarks, examples: built, so
#      that they are known to compile);
#   2. every other Bazel test under AddressSanitizer + LeakSanitizer
#      (--config=asan), building only those tests and what they depend on;
#   3. the concurrency tests under ThreadSanitizer (--config=tsan):
#      the coordinator, the rendezvous store, the HTTP server, metrics and
#      rate limiter (code without LibTorch, whose uninstrumented thread
#      pools TSan cannot follow);
#   4. the layering of BUILD.bazel (tools/check_layering.sh: no forbidden
#      dependency, transitive or on third-party libraries);
#   5. the counting check: this script run on the fixtures of
#      //tests/counting (a target that fails after writing an all-pass XML,
#      a skip, a target that does not build, a shell test that dies, a data
#      race under TSan, a leak under LSan) must print the closing line each
#      deserves and exit non-zero; and a library that breaks the annotated
#      lock discipline must fail to compile with clang's thread-safety
#      error (every build has -Werror=thread-safety);
#   6. the libFuzzer targets under ASan, TRAINYARD_FUZZ_SECONDS each (30),
#      one per core at a time;
#   7. the image (deploy/image_test.sh): deploy/Dockerfile built from
#      source with podman, reusing what the host compiled (Bazel's disk
#      cache mounted into the build), a coordinator and two workers run as
#      containers, jobs from the CLI outside, a worker container stopped
#      (preemption);
#   8. the GPU configuration compiled and linked (--config=cuda against the
#      CUDA LibTorch of scripts/setup-libtorch-cuda.sh): the worker binary,
#      the GPU tests and the GPU benchmark (nothing CUDA runs on a machine
#      without a GPU; bench/gpu/run.sh runs them on one).
#
#   scripts/test.sh --long
# runs all of that, then the long versions of what CI runs short: fuzz
# campaigns of TRAINYARD_LONG_FUZZ_SECONDS (600) per target, the chaos soak
# (tests/chaos/soak.sh, 40 faults), goodput under a failure rate
# (tests/chaos/rate.sh, 3000 steps per mode), the control plane at scale
# (bench/scale/run.sh, 1032 workers) and both images built as users build
# them (deploy/image_test.sh --long: -c opt from source, and the CUDA image).
#
#   scripts/test.sh [--config=NAME] PATTERN...
# runs only those Bazel targets (e.g. //tests/system:all), counted the same
# way, with the same exit status.
#
# Ends with the wall time of each step, how many test targets Bazel ran and
# how many results it took from its caches, and one line "N passed, N
# failed, N skipped" (scripts/test_summary.py): Bazel's own verdict for
# each test target of this run decides, test cases are counted from those
# targets' XML, and skips are listed with their reasons. Exits 1 if
# anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
long=0
if [ "${1:-}" = --long ]; then
  long=1
  shift
  [ $# -eq 0 ] || { echo "usage: scripts/test.sh --long   (the whole suite, then the long runs)" >&2; exit 2; }
fi
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
# run in the default build, with every target no ASan test depends on;
# if a query fails, every test does.
asan_tests='tests(//...) except attr(tags, "\bno_asan\b", tests(//...)) except attr(tags, "\bmanual\b", //...)'
mapfile -t plain_tests < <(bazel query 'attr(tags, "\bno_asan\b", tests(//...))' 2>/dev/null)
mapfile -t plain_others < <(bazel query "kind(rule, //...) except tests(//...) except attr(tags, \"\\bmanual\\b\", //...) \
  except deps($asan_tests)" 2>/dev/null)
bazel_tests default -- "${plain_tests[@]}" "${plain_others[@]}"
bazel_tests asan --config=asan --build_tests_only
bazel_tests tsan --config=tsan -- //coordinator:all //coordinator/testing:all //collective:store_test //common:http_server_test \
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

# The lock discipline is checked by every build (.bazelrc:
# -Werror=thread-safety): a library that breaks it must not compile, and
# for that reason.
lock_violation_does_not_build() {
  local out
  if out=$(bazel build //tests/counting:thread_safety_violation 2>&1); then
    echo "//tests/counting:thread_safety_violation built: the lock discipline is not checked"
    return 1
  fi
  if ! grep -q "writing variable 'count_' requires holding mutex 'mu_' exclusively \[-Werror,-Wthread-safety-analysis\]" <<<"$out"; then
    echo "//tests/counting:thread_safety_violation failed, but not with clang's thread-safety error:"
    tail -n 20 <<<"$out"
    return 1
  fi
  echo "thread safety: a write to a guarded member without its lock is a compile error in every build"
}
run_step "thread safety: a lock-discipline violation does not compile (-Werror=thread-safety)" \
  lock_violation_does_not_build

run_step "fuzz" scripts/fuzz.sh "${TRAINYARD_FUZZ_SECONDS:-30}"

# The image built and run with podman: one case per check of
# deploy/image_test.sh (it needs the CLI of the default build).
image_step() {  # NAME IMAGE-TEST-FLAGS...
  local step="$1"; shift
  echo "==> $step"
  local start=$SECONDS out rc line name cases=0
  if bazel build //client:trainyard; then
    out="$(deploy/image_test.sh "$@" 2>&1)"
    rc=$?
  else
    out="FAIL: the CLI (bazel build //client:trainyard) (exit 1)"
    rc=1
  fi
  summary_args+=("--step" "$step=$((SECONDS - start))")
  printf '%s\n' "$out"
  while IFS= read -r line; do
    case "$line" in
      "PASS: "*) summary_args+=("--check" "image: ${line#PASS: }=pass"); cases=$((cases + 1)) ;;
      "FAIL: "*" (exit "*")") name="${line#FAIL: }"; summary_args+=("--check" "image: ${name% (exit *}=fail")
        cases=$((cases + 1)) ;;
      "FAIL: "*) name="${line#FAIL: }"; summary_args+=("--check" "image: ${name%%: *}=fail")
        cases=$((cases + 1)) ;;
    esac
  done <<<"$out"
  if [ "$rc" -ne 0 ] && ! grep -q '^FAIL: ' <<<"$out"; then
    summary_args+=("--check" "image: deploy/image_test.sh $* exited $rc=fail")
  elif [ "$cases" -eq 0 ]; then
    summary_args+=("--check" "image: deploy/image_test.sh $* reported no check=fail")
  fi
}
image_step "image (deploy/image_test.sh)"

if [ -f /usr/local/cuda/include/nccl.h ]; then
  run_step "cuda libtorch" scripts/setup-libtorch-cuda.sh
  run_step "cuda build" bazel build --config=cuda //third_party:cuda_link_check //client:trainyard-torch \
    //bench:gpu_bench //collective:nccl_collective_test //trainer:device_training_test //common/torch:device_test
else
  echo "==> cuda build skipped: no CUDA toolkit with NCCL under /usr/local/cuda"
  summary_args+=("--skip" "cuda build=no CUDA toolkit with NCCL under /usr/local/cuda")
fi

# --- The long runs (scripts/test.sh --long) ---
if [ "$long" -eq 1 ]; then
  run_step "long: fuzz campaigns (${TRAINYARD_LONG_FUZZ_SECONDS:-600} s per target)" \
    scripts/fuzz.sh "${TRAINYARD_LONG_FUZZ_SECONDS:-600}"
  run_step "long: chaos soak (tests/chaos/soak.sh)" tests/chaos/soak.sh
  run_step "long: goodput under a failure rate (tests/chaos/rate.sh)" tests/chaos/rate.sh
  run_step "long: the control plane at scale (bench/scale/run.sh)" bench/scale/run.sh
  image_step "long: both images as users build them (deploy/image_test.sh --long)" --long
fi

python3 scripts/test_summary.py --step "total=$((SECONDS - suite_start))" "${summary_args[@]}"
