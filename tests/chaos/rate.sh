#!/usr/bin/env bash
# Goodput under a failure rate, the long run (tests/chaos/rate_test.py says
# what it checks): a longer job than CI's 300 steps, at a lower rate. Needs
# root (network namespaces). Prints one JSON object per mode (ELASTIC,
# RESTART); they also go to .bench/chaos/.
#
# usage: tests/chaos/rate.sh [--seed N] [--steps N] [--mtbf SECONDS]
#        (default --seed 7 --steps 3000 --mtbf 30)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build //client:trainyard >/dev/null 2>&1 || { bazel build //client:trainyard; exit 1; }
mkdir -p .bench/chaos
report=".bench/chaos/rate-$(date +%Y%m%d-%H%M%S).json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
TEST_TMPDIR="$work" .venv-jax/bin/python -u tests/chaos/rate_test.py --trainyard bazel-bin/client/trainyard \
  --seed 7 --steps 3000 --mtbf 30 --report "$report" "$@"
cat "$report"
