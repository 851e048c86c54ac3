#!/usr/bin/env bash
# Bytes between hosts per step, sharding over every rank against hybrid
# sharding with one group per host (traffic.py says what is measured).
# Needs root (network namespaces, iptables, tc). Prints JSON lines; also
# kept in .bench/sharding/.
#   bench/sharding/traffic.sh [PRESET [STEPS [RATE_MBIT]]]   (tiny 6 0: links not limited)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
bazel build //client:trainyard >/dev/null 2>&1 || { bazel build //client:trainyard; exit 1; }
bin="$(bazel info bazel-bin 2>/dev/null)"
mkdir -p .bench/sharding
python3 bench/sharding/traffic.py --trainyard "$bin/client/trainyard" --preset "${1:-tiny}" --steps "${2:-6}" \
  --rate-mbit "${3:-0}" | tee ".bench/sharding/traffic-$(date +%Y%m%d-%H%M%S).jsonl"
