#!/usr/bin/env bash
# Time from a lost worker to training again, fault_tolerance ELASTIC against
# RESTART (see recovery_bench.py).
# usage: bench/elastic/run.sh [--models tiny,t5_1_1_small] [--reps N]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build -c opt //client:trainyard >/dev/null 2>&1 || { bazel build -c opt //client:trainyard; exit 1; }
trainyard="$(bazel info -c opt bazel-bin 2>/dev/null)/client/trainyard"
exec .venv-jax/bin/python bench/elastic/recovery_bench.py --trainyard "$trainyard" "$@"
