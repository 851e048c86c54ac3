#!/usr/bin/env bash
# The control plane at cluster scale (bench/scale/run.py says what is
# measured): a real coordinator and simulated workers, built optimised.
# Prints one JSON object; it also goes to .bench/scale/.
#
# usage: bench/scale/run.sh [run.py flags]   (default --workers 1032 --gangs 256,1024)
#        bench/scale/run.sh --workers 4104 --gangs 1024,4096 --chunks 20
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build -c opt //client:trainyard //bench/scale:sim_workers >/dev/null 2>&1 \
  || { bazel build -c opt //client:trainyard //bench/scale:sim_workers; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
mkdir -p .bench/scale
.venv-jax/bin/python bench/scale/run.py --trainyard "$bin/client/trainyard" --sim "$bin/bench/scale/sim_workers" "$@" \
  | tee ".bench/scale/$(date +%Y%m%d-%H%M%S).json"
