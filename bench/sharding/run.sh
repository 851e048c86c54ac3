#!/usr/bin/env bash
# Peak worker memory for each sharding mode (memory.py says
# what is measured). Prints JSON lines; also kept in .bench/sharding/.
#   bench/sharding/run.sh [PRESET [WORKERS [OPTIMIZER [GROUP_SIZE]]]]   (t5_1_1_small 2 adamw; no groups)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build //client:trainyard >/dev/null 2>&1 || { bazel build //client:trainyard; exit 1; }
bin="$(bazel info bazel-bin 2>/dev/null)"
mkdir -p .bench/sharding
python3 bench/sharding/memory.py --trainyard "$bin/client/trainyard" --preset "${1:-t5_1_1_small}" \
  --workers "${2:-2}" --optimizer "${3:-adamw}" --group-size "${4:-0}" | tee ".bench/sharding/$(date +%Y%m%d-%H%M%S).jsonl"
