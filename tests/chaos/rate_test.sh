#!/bin/bash
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON safetensors
exec "$python" -u tests/chaos/rate_test.py --trainyard "$1"
