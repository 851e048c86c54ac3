#!/usr/bin/env bash
# SIGTERM-to-durable latency of the emergency checkpoint for t5_1_1_small
# (see preemption_bench.py). usage: bench/preemption/run.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build -c opt //client:trainyard >/dev/null 2>&1 || { bazel build -c opt //client:trainyard; exit 1; }
trainyard="$(bazel info -c opt bazel-bin 2>/dev/null)/client/trainyard"
exec .venv-jax/bin/python bench/preemption/preemption_bench.py --trainyard "$trainyard" --reps "${1:-3}"
