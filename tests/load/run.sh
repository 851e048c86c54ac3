#!/bin/bash
# The full load test: 200 WatchJob streams and 50 submits/s for 60 s against
# a real coordinator (then 200/s for 20 s, to show the headroom). Writes
# .bench/load/*.json; docs/reliability.md records the figures.
#   tests/load/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build //client:trainyard >/dev/null 2>&1
mkdir -p .bench/load
.venv-jax/bin/python tests/load/load_test.py --trainyard bazel-bin/client/trainyard \
  --duration 60 --rate 50 --streams 200 --json .bench/load/rate50.json
.venv-jax/bin/python tests/load/load_test.py --trainyard bazel-bin/client/trainyard \
  --duration 20 --rate 200 --streams 200 --json .bench/load/rate200.json
