#!/bin/bash
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON grpc_tools
exec "$python" -u tests/interactive/export_test.py --trainyard "$1" --export "$2" --train-predict "$3" --evaluate "$4"
