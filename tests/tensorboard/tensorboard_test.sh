#!/usr/bin/env bash
# Our event files, read back by the real TensorBoard (in .venv-jax, made by
# scripts/setup.sh and named by TRAINYARD_JAX_PYTHON).
set -u
write="$1"
python="${TRAINYARD_JAX_PYTHON:-}"
if [ -z "$python" ] || ! "$python" -c 'import tensorboard' 2>/dev/null; then
  echo "FAIL: TRAINYARD_JAX_PYTHON ('$python') is not a Python with tensorboard; run scripts/setup.sh"
  exit 1
fi
out="${TEST_TMPDIR:-$(mktemp -d)}/events"
"$write" "$out" || exit 1
"$python" tests/tensorboard/read_events.py "$out"
