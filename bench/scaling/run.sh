#!/usr/bin/env bash
# Data-parallel efficiency on this machine (bench/scaling/run.py).
# usage: bench/scaling/run.sh [REPS [PRESET [STEPS]]]   (default 3, tiny, 20)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build -c opt //client:trainyard >/dev/null 2>&1 || { bazel build -c opt //client:trainyard; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
mkdir -p .bench/scaling
.venv-jax/bin/python bench/scaling/run.py --trainyard "$bin/client/trainyard" --reps "${1:-3}" \
  --preset "${2:-tiny}" --steps "${3:-20}" | tee ".bench/scaling/$(date +%Y%m%d-%H%M%S).jsonl"
