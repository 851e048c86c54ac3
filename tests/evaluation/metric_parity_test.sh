#!/bin/bash
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON sacrebleu
exec "$python" -u tests/evaluation/metric_parity_test.py --tool "$1"
