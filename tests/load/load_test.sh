#!/bin/bash
# A short run of the load test (tests/load/load_test.py) on every CI run;
# tests/load/run.sh runs the full minute and writes the figures.
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON grpc_tools
exec "$python" -u tests/load/load_test.py --trainyard "$1" --duration "${2:-10}"
