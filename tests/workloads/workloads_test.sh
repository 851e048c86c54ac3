#!/bin/bash
# Runs workloads_test.py with the test Python that has TensorBoard
# (scripts/setup.sh).
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON tensorboard
exec "$python" -u tests/workloads/workloads_test.py --trainyard "$1"
