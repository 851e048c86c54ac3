#!/bin/bash
# Runs continuous_eval_test.py with the test Python (scripts/setup.sh).
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_PYTHON json
exec "$python" -u tests/system/continuous_eval_test.py --trainyard "$1"
