#!/bin/bash
# Runs vocabulary_test.py with the test Python that has transformers and
# sentencepiece (scripts/setup.sh).
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_PYTHON transformers
export OMP_NUM_THREADS=1
exec "$python" -u tests/hf/vocabulary_test.py --trainyard "$1"
