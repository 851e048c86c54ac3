#!/bin/bash
# bench/scale/run.py --check: every job SUCCEEDED, every chunk reached every
# rank once, the job whose worker died restarted once on a new gang.
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON safetensors
exec "$python" -u bench/scale/run.py --check --trainyard "$1" --sim "$2" --workers 72 --gangs 16,64 --chunks 6 \
  --idle-seconds 1
