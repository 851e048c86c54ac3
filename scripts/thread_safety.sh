#!/usr/bin/env bash
# Builds the libraries whose shared state is annotated (ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED) with clang's -Wthread-safety as an error
# (--config=thread_safety), in the clang output base scripts/fuzz.sh uses, so
# that switching compilers never invalidates the main build.
#   scripts/thread_safety.sh
set -euo pipefail
cd "$(dirname "$0")/.."
base="${TRAINYARD_FUZZ_OUTPUT_BASE:-$HOME/.cache/trainyard-fuzz/$(pwd | md5sum | cut -c1-12)}"
targets=(
  //coordinator:coordinator //coordinator:job_driver //coordinator:session_manager //coordinator:worker_registry
  //coordinator:job_store //collective:store //worker:worker_core //trainer:train_checkpoint //common:http_server
  //trainer:metrics_manager //common:metrics //common:clock //common:rate_limiter //data
)
if ! bazel --output_base="$base" build --symlink_prefix=/ --config=thread_safety --keep_going "${targets[@]}" >/tmp/trainyard-tsa-build.log 2>&1; then
  grep -E "error:|ERROR:" /tmp/trainyard-tsa-build.log | sort -u | head -60 >&2
  exit 1
fi
echo "thread safety: ${#targets[@]} libraries build with -Werror=thread-safety"
