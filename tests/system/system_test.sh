#!/bin/bash
# Runs system_test.py with the test Python that has grpcio (scripts/setup.sh).
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON grpc_tools
exec "$python" -u tests/system/system_test.py --trainyard "$1"
