#!/usr/bin/env bash
# Our event files, read back by the real TensorBoard (in .venv-jax, made by
# scripts/setup.sh and named by TRAINYARD_JAX_PYTHON).
set -u
source tests/testing/cases.sh
write="$1"
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON tensorboard
out="${TEST_TMPDIR:-$(mktemp -d)}/events"
case_check "write event files" "$write" "$out" || exit 1
case_check "TensorBoard reads them back" "$python" tests/tensorboard/read_events.py "$out"
