#!/usr/bin/env bash
# The long chaos soak (tests/chaos/chaos_test.py says what it checks): more
# faults over a longer job than CI's 10. Needs root (network namespaces, a
# tmpfs for the output disk). Prints the run's figures as one JSON object;
# they also go to .bench/chaos/.
#
# usage: tests/chaos/soak.sh [--seed N] [--faults N]   (default --seed 7 --faults 40)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build //client:trainyard >/dev/null 2>&1 || { bazel build //client:trainyard; exit 1; }
mkdir -p .bench/chaos
report=".bench/chaos/$(date +%Y%m%d-%H%M%S).json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
TEST_TMPDIR="$work" .venv-jax/bin/python -u tests/chaos/chaos_test.py --trainyard bazel-bin/client/trainyard \
  --seed 7 --faults 40 --report "$report" "$@"
cat "$report"
